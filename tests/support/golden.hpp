// SPDX-License-Identifier: MIT
// Test files on disk: the PyTorch golden cases under tests/golden/mha/ and throwaway directories.
#pragma once

#include <algorithm>     // std::sort
#include <chrono>        // std::chrono::steady_clock
#include <filesystem>    // std::filesystem::path, directory_iterator, temp_directory_path
#include <fstream>       // std::ifstream
#include <map>           // std::map
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string, std::stoi, std::getline
#include <system_error>  // std::error_code
#include <vector>        // std::vector

#include <headwise/io/npy.hpp>
#include <headwise/tensor.hpp>

#ifndef HEADWISE_SOURCE_DIR
#error "tests need HEADWISE_SOURCE_DIR, the repository root, to find tests/golden"
#endif

namespace headwise::test {

/// tests/golden of the source tree, wherever the build directory is.
inline std::filesystem::path golden_dir() {
    return std::filesystem::path(HEADWISE_SOURCE_DIR) / "tests" / "golden";
}

/// One case written by tests/golden/make_mha_golden.py or make_gqa_golden.py:
/// tests/golden/<set>/<name>/.
struct GoldenCase {
    std::string name;
    std::filesystem::path dir;
    std::map<std::string, std::string> meta;        // meta.txt, one key=value per line
    std::map<std::string, Tensor<double>> tensors;  // every float64 <key>.npy of the directory
    std::map<std::string, Tensor<bool>> masks;      // every bool <key>.npy of the directory
    std::map<std::string, Tensor<double>> grads;    // grad/<parameter>.npy, PyTorch's names

    /// meta.txt's integer `key`; throws naming the case when it is missing or not a number.
    int meta_int(const std::string& key) const {
        const auto it = meta.find(key);
        if (it == meta.end())
            throw std::runtime_error("golden case '" + name + "': meta.txt has no key '" + key +
                                     "'");
        std::size_t used = 0;
        int value = 0;
        try {
            value = std::stoi(it->second, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != it->second.size())
            throw std::runtime_error("golden case '" + name + "': meta.txt: " + key + "=" +
                                     it->second + " is not an integer");
        return value;
    }
    bool flag(const std::string& key) const { return meta_int(key) != 0; }

    bool has(const std::string& key) const { return tensors.count(key) + masks.count(key) > 0; }
    const Tensor<double>& tensor(const std::string& key) const { return find(tensors, key); }
    const Tensor<bool>& mask(const std::string& key) const { return find(masks, key); }
    const Tensor<double>& grad(const std::string& key) const { return find(grads, key); }

    /// The module's parameters, named as in PyTorch's state_dict(): the tensors that have a
    /// gradient under grad/ (every parameter has one; inputs and outputs do not).
    std::map<std::string, Tensor<double>> state_dict() const {
        std::map<std::string, Tensor<double>> sd;
        for (const auto& entry : grads) sd.emplace(entry.first, tensor(entry.first));
        return sd;
    }

private:
    template <class Map>
    const typename Map::mapped_type& find(const Map& map, const std::string& key) const {
        const auto it = map.find(key);
        if (it == map.end())
            throw std::runtime_error("golden case '" + name + "': no " + key + ".npy of that type");
        return it->second;
    }
};

/// The case names of a set, sorted: the subdirectories of tests/golden/<set> (mha: written by
/// make_mha_golden.py; gqa: by make_gqa_golden.py, in the same format).
inline std::vector<std::string> golden_case_names(const std::string& set = "mha") {
    std::vector<std::string> names;
    const std::filesystem::path root = golden_dir() / set;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory()) names.push_back(it->path().filename().string());
    if (ec || names.empty())
        throw std::runtime_error("no golden cases under " + root.string() +
                                 "; run tests/golden/make_" + set + "_golden.py");
    std::sort(names.begin(), names.end());
    return names;
}

/// Reads every file of tests/golden/<set>/<name>/, sorting .npy files by their dtype.
inline GoldenCase load_golden_case(const std::string& name, const std::string& set = "mha") {
    GoldenCase c;
    c.name = name;
    c.dir = golden_dir() / set / name;

    std::ifstream meta(c.dir / "meta.txt");
    if (!meta) throw std::runtime_error("golden case '" + name + "': cannot read meta.txt");
    for (std::string line; std::getline(meta, line);) {
        const auto eq = line.find('=');
        if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
        c.meta[line.substr(0, eq)] = line.substr(eq + 1);
    }

    for (const auto& entry : std::filesystem::directory_iterator(c.dir)) {
        const std::filesystem::path& file = entry.path();
        if (!entry.is_regular_file() || file.extension() != ".npy") continue;
        const std::string key = file.stem().string();
        if (read_npy_header(file.string()).descr == "|b1")
            c.masks.emplace(key, load_npy<bool>(file.string()));
        else
            c.tensors.emplace(key, load_npy<double>(file.string()));
    }
    // Sets of plain tensors (tests/golden/rope's rotations) have no parameters, hence no grad/.
    if (std::filesystem::is_directory(c.dir / "grad"))
        c.grads = load_npy_dict<double>((c.dir / "grad").string());
    return c;
}

/// A fresh, empty directory under the system's temporary directory, removed with its contents
/// on destruction. The name carries a tag and a clock reading, so test processes that run
/// concurrently (ctest -j) never share one.
class ScratchDir {
public:
    explicit ScratchDir(const std::string& tag) {
        const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
        path_ = std::filesystem::temp_directory_path() /
                ("headwise-" + tag + "-" + std::to_string(ticks));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~ScratchDir() {
        std::error_code ec;  // a destructor must not throw; a leftover directory is harmless
        std::filesystem::remove_all(path_, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    const std::filesystem::path& path() const { return path_; }
    /// "<dir>/<name>" as a string, the form the npy functions take.
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

}  // namespace headwise::test
