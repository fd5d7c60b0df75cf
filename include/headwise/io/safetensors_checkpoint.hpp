// SPDX-License-Identifier: MIT
// The weights of a Hugging Face model directory: one model.safetensors, or the shards that
// model.safetensors.index.json lists.
#pragma once

#if !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/io/safetensors_checkpoint.hpp needs nlohmann/json (Debian: nlohmann-json3-dev; \
CMake: find_package(nlohmann_json) before headwise, or link nlohmann_json::nlohmann_json)"
#endif

#include <nlohmann/json.hpp>

#include <filesystem>    // std::filesystem::exists
#include <map>           // std::map
#include <set>           // std::set
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string
#include <system_error>  // std::error_code
#include <utility>       // std::move

#include "../tensor.hpp"
#include "detail/json_file.hpp"
#include "safetensors.hpp"

namespace headwise::io {

/// A checkpoint's tensors and the file that stands for it in messages (model.safetensors or
/// model.safetensors.index.json).
template <class T>
struct SafetensorsCheckpoint {
    std::map<std::string, Tensor<T>> tensors;
    std::string source;
};

/// The weights of the Hugging Face model directory `dir`, as transformers' from_pretrained
/// finds them: `dir`/model.safetensors when it exists; else the shards named by
/// `dir`/model.safetensors.index.json ({"weight_map": {tensor: shard file}}, a shard a plain
/// file name in `dir`), each loaded with load_safetensors<T>. Throws std::runtime_error naming
/// the index file for an index that is no JSON object with a weight_map of strings, a shard
/// name with a '/' or one that is "." or "..", a tensor the weight_map gives to a shard that
/// does not hold it, or a tensor held by two shards; load_safetensors' errors for the files
/// (model.safetensors' when neither file exists).
template <class T>
SafetensorsCheckpoint<T> load_safetensors_checkpoint(const std::string& dir);

// ---- definitions ----------------------------------------------------------------------------

template <class T>
SafetensorsCheckpoint<T> load_safetensors_checkpoint(const std::string& dir) {
    constexpr const char* fn = "headwise::io::load_safetensors_checkpoint";
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    const std::string single = base + "model.safetensors";
    const std::string index_path = base + "model.safetensors.index.json";
    std::error_code ec;
    if (std::filesystem::exists(single, ec) || !std::filesystem::exists(index_path, ec))
        return {load_safetensors<T>(single), single};
    const nlohmann::json index = headwise::detail::read_json_file(fn, index_path);
    const auto fail = [&](const std::string& what) {
        throw std::runtime_error(std::string(fn) + ": " + index_path + ": " + what);
    };
    const auto map_it = index.find("weight_map");
    if (map_it == index.end() || !map_it->is_object() || map_it->empty())
        fail("weight_map must be a non-empty object of tensor: shard file, got " +
             (map_it == index.end() ? std::string("none")
                                    : headwise::detail::describe_json(*map_it)));
    std::map<std::string, std::set<std::string>> wanted;  // shard -> its tensors
    for (auto it = map_it->begin(); it != map_it->end(); ++it) {
        if (!it->is_string())
            fail("weight_map[" + headwise::detail::quote_bounded(it.key()) +
                 "] must be a shard file name, got " + headwise::detail::describe_json(*it));
        const std::string& shard = it->get_ref<const std::string&>();
        if (shard.empty() || shard == "." || shard == ".." ||
            shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos)
            fail("weight_map[" + headwise::detail::quote_bounded(it.key()) +
                 "] must be a file name in the directory (no '/'), got " +
                 headwise::detail::quote_bounded(shard));
        wanted[shard].insert(it.key());
    }
    SafetensorsCheckpoint<T> out;
    out.source = index_path;
    for (const auto& [shard, names] : wanted) {
        std::map<std::string, Tensor<T>> part = load_safetensors<T>(base + shard);
        for (const std::string& name : names)
            if (part.find(name) == part.end())
                fail("weight_map gives " + headwise::detail::quote_bounded(name) + " to " +
                     headwise::detail::quote_bounded(shard) + ", which does not hold it");
        for (auto& [name, tensor] : part) {
            if (out.tensors.find(name) != out.tensors.end())
                fail(headwise::detail::quote_bounded(name) + " is held by two shards (" +
                     headwise::detail::quote_bounded(shard) + " and another)");
            out.tensors.emplace(name, std::move(tensor));
        }
    }
    return out;
}

}  // namespace headwise::io
