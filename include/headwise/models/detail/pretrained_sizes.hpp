// SPDX-License-Identifier: MIT
// The sizes a model directory's config.json asks for, checked against the weight file's tensors
// before the model is built (models/bert.hpp, models/llama.hpp).
#pragma once

#include <cstddef>    // std::size_t
#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "../../config.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"

namespace headwise::detail {

/// One axis of a tensor whose extent config.json gives: the key and its value.
struct ConfigExtent {
    const char* key;
    Index value;
};

/// Throws std::invalid_argument unless `state` (the weights of file `weights`) holds `tensor` of
/// the shape `extents` give: "<fn>: <config>: <key> is <value>, but <weights> holds <tensor> of
/// shape [...]" naming each key whose axis differs, or "<fn>: <weights>: <tensor>: missing from
/// the state dict, expected shape [...] (config.json's <keys>)". A model's allocation is sized
/// by these extents; checking them first keeps a config.json that asks for more than the file
/// holds from allocating (and initialising) it.
template <class T>
void check_config_extents(const char* fn, const std::string& config, const std::string& weights,
                          const std::map<std::string, Tensor<T>>& state, const std::string& tensor,
                          const std::vector<ConfigExtent>& extents) {
    // The expected shape as text, not as a Shape: extents of a hostile config.json may have a
    // product that no Shape can hold.
    std::string expected = "[", keys;
    for (const ConfigExtent& e : extents) {
        expected += (keys.empty() ? "" : ", ") + std::to_string(e.value);
        keys += (keys.empty() ? "" : ", ") + std::string(e.key);
    }
    expected += "]";
    const auto it = state.find(tensor);
    if (it == state.end())
        throw std::invalid_argument(std::string(fn) + ": " + weights + ": " + tensor +
                                    ": missing from the state dict, expected shape " + expected +
                                    " (config.json's " + keys + ")");
    const Shape& held = it->second.shape();
    const bool same_rank = held.rank() == static_cast<int>(extents.size());
    std::string differ;
    for (std::size_t i = 0; i < extents.size(); ++i)
        if (!same_rank || held[static_cast<int>(i)] != extents[i].value)
            differ += (differ.empty() ? "" : " and ") + std::string(extents[i].key) + " is " +
                      std::to_string(extents[i].value);
    if (differ.empty()) return;
    throw std::invalid_argument(std::string(fn) + ": " + config + ": " + differ + ", but " +
                                weights + " holds " + tensor + " of shape " + held.str() +
                                " (expected " + expected + ")");
}

/// Throws std::invalid_argument unless the layers of `state` (keys "<prefix><i>.", e.g.
/// "model.layers.0.") number `layers`, config.json's `key`: "<fn>: <config>: <key> is <value>,
/// but <weights> holds 2 layers (<prefix>0 to <prefix>1)". The count is one past the largest
/// index present; a layer missing below it is left to the loader, which names its tensors.
template <class T>
void check_config_layers(const char* fn, const std::string& config, const std::string& weights,
                         const std::map<std::string, Tensor<T>>& state, const std::string& prefix,
                         const char* key, Index layers) {
    Index held = 0;
    for (auto it = state.lower_bound(prefix);
         it != state.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
        // The index: decimal digits up to the next '.', at most 18 (else not a layer's key).
        Index index = 0;
        std::size_t at = prefix.size(), digits = 0;
        for (; at < it->first.size() && it->first[at] >= '0' && it->first[at] <= '9'; ++at)
            if (++digits <= 18) index = index * 10 + (it->first[at] - '0');
        if (digits == 0 || digits > 18 || at == it->first.size() || it->first[at] != '.') continue;
        if (index + 1 > held) held = index + 1;
    }
    if (held == layers) return;
    const std::string holds = held == 0   ? "no " + prefix + "* tensors"
                              : held == 1 ? "1 layer (" + prefix + "0)"
                                          : std::to_string(held) + " layers (" + prefix + "0 to " +
                                                prefix + std::to_string(held - 1) + ")";
    throw std::invalid_argument(std::string(fn) + ": " + config + ": " + key + " is " +
                                std::to_string(layers) + ", but " + weights + " holds " + holds);
}

}  // namespace headwise::detail
