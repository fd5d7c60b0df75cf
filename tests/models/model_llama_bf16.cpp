// SPDX-License-Identifier: MIT
// The 100M-parameter Llama of `bench/run.py llama --model llama-100m` (12 layers, hidden 768, 4
// key/value heads, vocabulary 32000; random weights of std 0.02) in Precision::bf16 against itself
// in float: the logits of 4 prompts of 64 tokens, and decode token by token with a bf16 KV cache.
//
//   HEADWISE_LLAMA_100M_DIR=<model dir> model_tests llama_bf16
//
// The directory defaults to ~/.cache/headwise/models/llama-100m, where `bench/run.py llama
// --model llama-100m` writes it. Without the model files it prints why and exits 77, which ctest
// reports as skipped.

#include "model_test.hpp"

#include <headwise/models/llama.hpp>
#include <headwise/precision.hpp>

#include <algorithm>  // std::max, std::sort, std::max_element
#include <cmath>      // std::abs
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf
#include <cstdlib>    // std::getenv
#include <fstream>    // std::ifstream
#include <random>     // std::mt19937_64, std::uniform_int_distribution
#include <string>     // std::string
#include <vector>     // std::vector

namespace model_llama_bf16 {

constexpr int kSkip = 77;
// Logits pass through 2 x 12 + 1 bf16 products in a row; per position, max |Δ| / max |float|
// (reached: 1.1e-2), the bound of the tiny Llamas of test_models_bf16.
constexpr double kMaxRelative = 2e-2;
// The share of positions whose arg max is float's (reached: 96.9%); random weights give logits
// with close maxima, so some near ties flip.
constexpr double kMinTop1 = 0.9;

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;

/// Per position of logits [B, L, V]: max |a - b| / max |b|.
std::vector<double> position_errors(const Tensor<float>& a, const Tensor<float>& b) {
    const Index rows = a.size(0) * a.size(1), V = a.size(2);
    std::vector<double> errors;
    for (Index r = 0; r < rows; ++r) {
        double diff = 0, scale = 0;
        for (Index v = 0; v < V; ++v) {
            diff = std::max(
                diff, std::abs(static_cast<double>(a.data()[r * V + v]) - b.data()[r * V + v]));
            scale = std::max(scale, std::abs(static_cast<double>(b.data()[r * V + v])));
        }
        errors.push_back(diff / scale);
    }
    return errors;
}

/// The share of positions of logits [B, L, V] whose arg max agree.
double top1_agreement(const Tensor<float>& a, const Tensor<float>& b) {
    const Index rows = a.size(0) * a.size(1), V = a.size(2);
    Index same = 0;
    for (Index r = 0; r < rows; ++r) {
        const float* x = a.data() + r * V;
        const float* y = b.data() + r * V;
        same += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
    }
    return static_cast<double>(same) / static_cast<double>(rows);
}

void summary(const char* what, std::vector<double> e) {
    std::sort(e.begin(), e.end());
    std::printf("model_llama_bf16: %s: median %.3g, max %.3g relative over %zu positions\n", what,
                e[e.size() / 2], e.back(), e.size());
}

int run() {
    const char* env = std::getenv("HEADWISE_LLAMA_100M_DIR");
    const char* home = std::getenv("HOME");
    const std::string dir = env    ? env
                            : home ? std::string(home) + "/.cache/headwise/models/llama-100m"
                                   : "";
    for (const char* file : {"config.json", "model.safetensors"})
        if (dir.empty() || !std::ifstream(dir + "/" + file).good()) {
            std::printf(
                "skipped: the 100M Llama not found (set HEADWISE_LLAMA_100M_DIR, or run "
                "`bench/run.py llama --model llama-100m` once to build it under "
                "~/.cache/headwise/models)%s%s\n",
                dir.empty() ? "" : ": no ", dir.empty() ? "" : (dir + "/" + file).c_str());
            return kSkip;
        }
    auto model = headwise::models::LlamaForCausalLM<float>::from_pretrained(dir);
    const Index B = 4, L = 64, V = model.config().vocab_size;
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<std::int64_t> token(3, V - 1);
    Tensor<std::int64_t> ids(Shape{B, L});
    for (Index i = 0; i < ids.numel(); ++i) ids.data()[i] = token(rng);

    const Tensor<float> f32 = model.forward(ids);  // [B, L, V]
    model.with_precision(headwise::Precision::bf16);
    const Tensor<float> bf16 = model.forward(ids);
    const std::vector<double> errors = position_errors(bf16, f32);
    summary("bf16 forward vs float", errors);
    const double top1 = top1_agreement(bf16, f32);
    std::printf("model_llama_bf16: arg max of bf16 = float's at %.1f%% of positions\n", 100 * top1);

    // Decode token by token with a bf16 cache against bf16's forward.
    auto cache = model.make_cache(B, L, headwise::Precision::bf16);
    Tensor<float> steps(Shape{B, L, V});
    for (Index t = 0; t < L; ++t) {
        Tensor<std::int64_t> one(Shape{B, 1});
        for (Index b = 0; b < B; ++b) one.data()[b] = ids.data()[b * L + t];
        const Tensor<float> step = model.decode(one, cache);  // [B, 1, V]
        for (Index b = 0; b < B; ++b)
            std::copy_n(step.data() + b * V, V, steps.data() + (b * L + t) * V);
    }
    const std::vector<double> decode_errors = position_errors(steps, bf16);
    summary("decode with a bf16 cache vs bf16 forward", decode_errors);

    const bool ok = *std::max_element(errors.begin(), errors.end()) <= kMaxRelative &&
                    *std::max_element(decode_errors.begin(), decode_errors.end()) <= kMaxRelative &&
                    top1 >= kMinTop1;
    std::printf("model_llama_bf16: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
}

const model_tests::Registration registration{"llama_bf16", run};

}  // namespace model_llama_bf16
