// SPDX-License-Identifier: MIT
// What both safetensors fuzz targets require of the reader: any bytes either load or throw
// std::runtime_error with a short message, and what loads saves and loads back bit for bit.
#pragma once

#include <headwise/io/safetensors.hpp>

#include <unistd.h>    // getpid
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint8_t
#include <cstdlib>     // std::abort
#include <cstring>     // std::memcmp, std::strlen, std::strncmp
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::path, is_directory, temp_directory_path
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string

namespace headwise_fuzz {

/// The file a round trip writes, in memory (/dev/shm) where there is one: the save's fsync and
/// rename cost little there.
inline std::string scratch_path() {
    static const std::filesystem::path dir = std::filesystem::is_directory("/dev/shm")
                                                 ? std::filesystem::path("/dev/shm")
                                                 : std::filesystem::temp_directory_path();
    return (dir / ("headwise_fuzz_safetensors_" + std::to_string(getpid()) + ".st")).string();
}

/// The reader's messages name the function and the file, then quote at most 80 bytes of any
/// value: a few hundred bytes in all, however large the input.
inline constexpr std::size_t kMaxMessage = 600;

template <class T>
void load_and_round_trip(const std::uint8_t* data, std::size_t size) {
    static const char kPrefix[] = "headwise::io::parse_safetensors: fuzz.safetensors: ";
    std::map<std::string, headwise::Tensor<T>> sd;
    try {
        sd = headwise::io::parse_safetensors<T>(data, size, "fuzz.safetensors");
    } catch (const std::runtime_error& e) {
        // Rejected: fine, when the message is the reader's own and short.
        if (std::strncmp(e.what(), kPrefix, sizeof kPrefix - 1) != 0 ||
            std::strlen(e.what()) > kMaxMessage)
            std::abort();
        return;
    } catch (const std::exception&) {
        std::abort();  // an exception type the reader does not document (e.g. nlohmann's)
    }
    const std::string path = scratch_path();
    headwise::io::save_safetensors(path, sd);
    const auto back = headwise::io::load_safetensors<T>(path);
    if (back.size() != sd.size()) std::abort();
    for (const auto& [name, t] : sd) {
        const auto it = back.find(name);
        if (it == back.end() || it->second.shape() != t.shape()) std::abort();
        if (t.numel() > 0 && std::memcmp(it->second.data(), t.data(),
                                         static_cast<std::size_t>(t.numel()) * sizeof(T)) != 0)
            std::abort();
    }
}

inline void check(const std::uint8_t* data, std::size_t size) {
    load_and_round_trip<float>(data, size);
    load_and_round_trip<double>(data, size);
}

}  // namespace headwise_fuzz
