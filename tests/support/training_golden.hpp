// SPDX-License-Identifier: MIT
// The torch cases of tests/golden/training/ (written by tests/golden/make_training_golden.py).
#pragma once

#include <cstdint>     // std::int64_t
#include <filesystem>  // std::filesystem::path
#include <fstream>     // std::ifstream
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string, std::stod, std::getline

#include <headwise/io/npy.hpp>
#include <headwise/tensor.hpp>

#include "golden.hpp"

namespace headwise::test {

/// One directory of tests/golden/training: meta.txt and every .npy file (grad/ under "grad/").
struct TrainingCase {
    std::string name;
    std::map<std::string, std::string> meta;
    std::map<std::string, Tensor<double>> tensors;

    const Tensor<double>& at(const std::string& key) const {
        const auto it = tensors.find(key);
        if (it == tensors.end())
            throw std::runtime_error("golden case '" + name + "': no " + key + ".npy");
        return it->second;
    }
    bool has(const std::string& key) const { return tensors.count(key) > 0; }
    double number(const std::string& key) const {
        const auto it = meta.find(key);
        if (it == meta.end())
            throw std::runtime_error("golden case '" + name + "': meta.txt has no '" + key + "'");
        return std::stod(it->second);
    }
    const std::string& text(const std::string& key) const {
        const auto it = meta.find(key);
        if (it == meta.end())
            throw std::runtime_error("golden case '" + name + "': meta.txt has no '" + key + "'");
        return it->second;
    }
    /// A float64 file of exact integers (indices, targets) as std::int64_t.
    Tensor<std::int64_t> indices(const std::string& key) const {
        const Tensor<double>& t = at(key);
        Tensor<std::int64_t> out(t.shape());
        for (Index i = 0; i < t.numel(); ++i)
            out.data()[i] = static_cast<std::int64_t>(t.data()[i]);
        return out;
    }
};

/// A Tensor<T> copy of a double tensor.
template <class T>
Tensor<T> cast(const Tensor<double>& t) {
    Tensor<T> out(t.shape());
    for (Index i = 0; i < t.numel(); ++i) out.data()[i] = static_cast<T>(t.data()[i]);
    return out;
}

inline TrainingCase load_training_case(const std::string& name) {
    TrainingCase c;
    c.name = name;
    const std::filesystem::path dir = golden_dir() / "training" / name;
    std::ifstream meta(dir / "meta.txt");
    if (!meta) throw std::runtime_error("golden case '" + name + "': cannot read meta.txt");
    for (std::string line; std::getline(meta, line);) {
        const auto eq = line.find('=');
        if (eq != std::string::npos) c.meta[line.substr(0, eq)] = line.substr(eq + 1);
    }
    c.tensors = load_npy_dict<double>(dir.string());
    if (std::filesystem::is_directory(dir / "grad"))
        for (auto& entry : load_npy_dict<double>((dir / "grad").string()))
            c.tensors.emplace("grad/" + entry.first, std::move(entry.second));
    return c;
}

}  // namespace headwise::test
