// SPDX-License-Identifier: MIT
// libFuzzer target for the .npy reader: any bytes either load or throw a clear error, and what
// loads saves and loads back bit for bit.
#include <headwise/io/npy.hpp>

#include <unistd.h>      // getpid
#include <cstddef>       // std::size_t
#include <cstdint>       // std::uint8_t
#include <cstdlib>       // std::abort
#include <cstring>       // std::memcmp
#include <exception>     // std::exception
#include <filesystem>    // std::filesystem::path, remove, temp_directory_path
#include <fstream>       // std::ofstream
#include <string>        // std::string
#include <system_error>  // std::error_code

namespace {

/// A file of this process's own for the bytes under test (load_npy reads from a path), in
/// memory (/dev/shm) where there is one: on disk, creating files caps fuzzing at ~300 inputs/s.
std::string scratch_path(const char* suffix) {
    static const std::filesystem::path dir = std::filesystem::is_directory("/dev/shm")
                                                 ? std::filesystem::path("/dev/shm")
                                                 : std::filesystem::temp_directory_path();
    return (dir / ("headwise_fuzz_npy_" + std::to_string(getpid()) + suffix)).string();
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
    std::error_code ignored;  // no file outlives the input (libFuzzer may end with _Exit)
    std::filesystem::remove(path, ignored);
    std::filesystem::remove(scratch_path(".copy.npy"), ignored);
    return 0;
}
