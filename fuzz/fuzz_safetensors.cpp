// SPDX-License-Identifier: MIT
// libFuzzer target for the safetensors reader: any bytes either load or throw a clear error, and
// what loads saves and loads back bit for bit.
#include <headwise/io/safetensors.hpp>

#include <unistd.h>    // getpid
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint8_t
#include <cstdlib>     // std::abort
#include <cstring>     // std::memcmp
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::temp_directory_path
#include <map>         // std::map
#include <string>      // std::string

namespace {

template <class T>
void load_and_round_trip(const std::uint8_t* data, std::size_t size) {
    std::map<std::string, headwise::Tensor<T>> sd;
    try {
        sd = headwise::io::parse_safetensors<T>(data, size, "fuzz.safetensors");
    } catch (const std::exception&) {
        return;  // rejected with an error: fine
    }
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("headwise_fuzz_safetensors_" + std::to_string(getpid()) + ".st"))
                                 .string();
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    load_and_round_trip<float>(data, size);
    load_and_round_trip<double>(data, size);
    return 0;
}
