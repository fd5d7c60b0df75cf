// SPDX-License-Identifier: MIT
// libFuzzer target for the .npy reader: any bytes either load or throw a clear error, and what
// loads saves and loads back bit for bit.
#include <headwise/io/npy.hpp>

#include <unistd.h>    // getpid
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint8_t
#include <cstdlib>     // std::abort
#include <cstring>     // std::memcmp
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::temp_directory_path
#include <fstream>     // std::ofstream
#include <string>      // std::string

namespace {

/// A file of this process's own for the bytes under test (load_npy reads from a path).
std::string scratch_path(const char* suffix) {
    return (std::filesystem::temp_directory_path() /
            ("headwise_fuzz_npy_" + std::to_string(getpid()) + suffix))
        .string();
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

/// Loads `path` as Tensor<T>; when that succeeds, saves it and loads it back, which must give
/// the same shape and the same bits.
template <class T>
void load_and_round_trip(const std::string& path) {
    headwise::Tensor<T> t;
    try {
        t = headwise::load_npy<T>(path);
    } catch (const std::exception&) {
        return;  // rejected with an error: fine
    }
    const std::string copy = scratch_path(".copy.npy");
    headwise::save_npy(copy, t);
    const headwise::Tensor<T> back = headwise::load_npy<T>(copy);
    if (back.shape() != t.shape() ||
        (t.numel() > 0 &&
         std::memcmp(back.data(), t.data(), static_cast<std::size_t>(t.numel()) * sizeof(T)) != 0))
        std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = scratch_path(".npy");
    write_file(path, data, size);
    try {
        const headwise::NpyHeader header = headwise::read_npy_header(path);
        static_cast<void>(header.shape.numel());  // a parsed shape is always countable
    } catch (const std::exception&) {
    }
    load_and_round_trip<float>(path);
    load_and_round_trip<double>(path);
    load_and_round_trip<bool>(path);
    return 0;
}
