// SPDX-License-Identifier: MIT
// libFuzzer target for the GGUF reader, fed raw bytes: any bytes either parse or throw
// std::runtime_error with a short message; what parses dequantizes every tensor within its
// bounds, and writes and reads back with the same metadata and tensor bytes.
#include <headwise/io/gguf.hpp>

#include <unistd.h>    // ::getpid
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint8_t
#include <cstdio>      // std::snprintf
#include <cstdlib>     // std::abort
#include <cstring>     // std::memcmp
#include <filesystem>  // std::filesystem::temp_directory_path, remove
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <vector>      // std::vector

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace headwise;
    try {
        const io::GgufFile f = io::parse_gguf(data, size, "fuzz.gguf");
        std::vector<io::GgufTensorData> tensors;
        for (const io::GgufTensorInfo& t : f.tensors()) {
            if (t.numel <= (Index{1} << 20)) static_cast<void>(f.to_float(t.name));
            tensors.push_back({t.name, t.type, t.shape(), f.tensor_data(t)});
        }
        // A rank-0 tensor (a scalar) is read but not written: the writer takes 1 to 4 dims.
        for (const auto& t : tensors)
            if (t.shape.rank() == 0) return 0;
        const std::string path = (std::filesystem::temp_directory_path() /
                                  ("headwise_fuzz_gguf_" + std::to_string(::getpid()) + ".gguf"))
                                     .string();
        io::save_gguf(path, f.metadata(), tensors, static_cast<std::uint32_t>(f.alignment()));
        const io::GgufFile back = io::load_gguf(path);
        std::filesystem::remove(path);
        if (!(back.metadata() == f.metadata()) || back.tensors().size() != tensors.size())
            std::abort();
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            const io::GgufTensorInfo& t = back.tensors()[i];
            const io::GgufTensorInfo& u = f.tensors()[i];
            if (t.name != u.name || t.type != u.type || t.dims != u.dims || t.bytes != u.bytes ||
                (t.bytes && std::memcmp(back.tensor_data(t), f.tensor_data(u), t.bytes) != 0))
                std::abort();
        }
    } catch (const std::runtime_error& e) {
        if (std::string(e.what()).size() > 600) std::abort();  // messages stay short
    }
    return 0;
}
