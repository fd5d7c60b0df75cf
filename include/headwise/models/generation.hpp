// SPDX-License-Identifier: MIT
// generate(): text generation from a causal language model with a KV cache: greedy,
// temperature, top-k and top-p sampling, stop tokens, left-padded prompt batches.
#pragma once

#include <algorithm>  // std::max, std::min, std::sort, std::find
#include <cmath>      // std::exp, std::isfinite
#include <cstdint>    // std::int64_t, std::uint64_t
#include <numeric>    // std::iota
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../random.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise::models {

/// How generate() chooses and stops.
struct GenerationOptions {
    Index max_new_tokens = 32;  // at most this many new tokens per prompt; >= 0
    /// 0: greedy (the highest logit, the lowest id among equal ones). > 0: sampling from
    /// softmax(logits / temperature), restricted by top_k and top_p. Finite and >= 0.
    double temperature = 0.0;
    Index top_k = 0;     // > 0: sample among the top_k highest logits only; 0: all
    double top_p = 1.0;  // in (0, 1]: nucleus sampling (see generate()); 1: off
    std::uint64_t seed = 0;
    /// Ids that end a sequence (the id is emitted, then the sequence stops). Empty: none.
    std::vector<std::int64_t> stop_tokens;
};

/// A batch of prompts of different lengths, left-padded to the longest: ids [B, L] (the
/// padding positions hold `pad_id`) and padding [B, L] (true where padded), as a causal model's
/// decode takes them (its positions count only the tokens that are not padding).
struct LeftPaddedBatch {
    Tensor<std::int64_t> ids;
    Tensor<bool> padding;
};

/// `prompts` left-padded to the longest; an empty list gives [0, 0] tensors, an empty prompt a
/// row of padding only.
inline LeftPaddedBatch left_pad(const std::vector<std::vector<std::int64_t>>& prompts,
                                std::int64_t pad_id = 0) {
    Index L = 0;
    for (const auto& p : prompts) L = std::max(L, static_cast<Index>(p.size()));
    const Index B = static_cast<Index>(prompts.size());
    LeftPaddedBatch batch{Tensor<std::int64_t>(Shape{B, L}), Tensor<bool>(Shape{B, L})};
    for (Index b = 0; b < B; ++b) {
        const auto& p = prompts[static_cast<std::size_t>(b)];
        const Index pad = L - static_cast<Index>(p.size());
        for (Index t = 0; t < L; ++t) {
            batch.padding.data()[b * L + t] = t < pad;
            batch.ids.data()[b * L + t] = t < pad ? pad_id : p[static_cast<std::size_t>(t - pad)];
        }
    }
    return batch;
}

/// The next token of one sequence from its logits row [V], as generate() chooses it; `rng` is
/// that sequence's generator (drawn once per sampled token, never for greedy). Sampling, in
/// double: z_v = logits_v / temperature; the ids are sorted by z descending (lower id first on
/// equal z); with top_k > 0 only the first top_k are kept; p = softmax(z) over the kept ids;
/// with top_p < 1 only the shortest prefix of the sorted ids whose p sums to at least top_p is
/// kept (at least one id); then u = uniform01(rng) in [0, 1) and the first kept id whose
/// cumulative p exceeds u times the kept total is chosen. This is transformers' order
/// (temperature, top-k, top-p), not its random stream.
template <class T, class Rng>
std::int64_t choose_next_token(const T* logits, Index V, const GenerationOptions& options,
                               Rng& rng) {
    if (options.temperature == 0.0) {
        Index best = 0;
        for (Index v = 1; v < V; ++v)
            if (logits[v] > logits[best]) best = v;
        return best;
    }
    std::vector<double> z(static_cast<std::size_t>(V));
    for (Index v = 0; v < V; ++v)
        z[static_cast<std::size_t>(v)] = static_cast<double>(logits[v]) / options.temperature;
    std::vector<Index> order(static_cast<std::size_t>(V));
    std::iota(order.begin(), order.end(), Index{0});
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
        return z[static_cast<std::size_t>(a)] > z[static_cast<std::size_t>(b)];
    });
    std::size_t kept = order.size();
    if (options.top_k > 0) kept = std::min(kept, static_cast<std::size_t>(options.top_k));
    const double top = z[static_cast<std::size_t>(order[0])];
    std::vector<double> p(kept);
    double total = 0.0;
    for (std::size_t i = 0; i < kept; ++i) {
        p[i] = std::exp(z[static_cast<std::size_t>(order[i])] - top);
        total += p[i];
    }
    if (options.top_p < 1.0) {
        double sum = 0.0;
        std::size_t n = 0;
        while (n < kept) {
            sum += p[n++] / total;
            if (sum >= options.top_p) break;
        }
        kept = n;
        total = 0.0;
        for (std::size_t i = 0; i < kept; ++i) total += p[i];
    }
    const double u = uniform01(rng) * total;
    double sum = 0.0;
    for (std::size_t i = 0; i < kept; ++i) {
        sum += p[i];
        if (sum > u) return order[i];
    }
    return order[kept - 1];  // rounding: u just below the total
}

/// Generates up to options.max_new_tokens new tokens after each prompt with `model`, a causal
/// language model with make_cache(batch, capacity), decode(ids [B, T], cache, padding [B, T])
/// -> logits [B, T, V] and config().vocab_size (LlamaForCausalLM). Returns the new ids of each
/// prompt (without the prompt), in prompt order; a sequence ends after max_new_tokens tokens or
/// after a stop token (which is included).
///
/// The prompts (each at least one id) are left-padded to the longest and run as one batch:
/// one prefill decode of all prompt tokens, then one decode step of one token per sequence
/// while any sequence runs (a finished sequence's step token is marked as padding). Positions
/// count only the non-padding tokens, so each prompt gives what it gives alone. Sequence b
/// draws from its own Generator seeded options.seed + b (see choose_next_token), so its tokens
/// depend on the seed and its own logits only. Throws std::invalid_argument for no prompts, an
/// empty prompt, options out of range, std::out_of_range for an id outside the vocabulary.
template <class Model>
std::vector<std::vector<std::int64_t>> generate(
    Model& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const GenerationOptions& options) {
    constexpr const char* fn = "headwise::models::generate";
    if (prompts.empty()) throw_invalid_argument(fn, "prompts", "must not be empty", "none");
    Index L = 0;
    for (std::size_t b = 0; b < prompts.size(); ++b) {
        if (prompts[b].empty())
            throw_invalid_argument(fn, "prompts[" + std::to_string(b) + "]",
                                   "must hold at least one id", "an empty prompt");
        L = std::max(L, static_cast<Index>(prompts[b].size()));
    }
    if (options.max_new_tokens < 0)
        throw_invalid_argument(fn, "options.max_new_tokens", "must be >= 0",
                               std::to_string(options.max_new_tokens));
    if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature))
        throw_invalid_argument(fn, "options.temperature", "must be finite and >= 0",
                               std::to_string(options.temperature));
    if (options.top_k < 0)
        throw_invalid_argument(fn, "options.top_k", "must be >= 0 (0: off)",
                               std::to_string(options.top_k));
    if (!(options.top_p > 0.0 && options.top_p <= 1.0))
        throw_invalid_argument(fn, "options.top_p", "must be in (0, 1]",
                               std::to_string(options.top_p));
    const Index B = static_cast<Index>(prompts.size());
    const Index V = model.config().vocab_size;
    std::vector<std::vector<std::int64_t>> out(prompts.size());
    if (options.max_new_tokens == 0) return out;

    // Prefill: the prompts left-padded (padding id 0, masked) in one decode.
    const LeftPaddedBatch prefill = left_pad(prompts);
    auto cache = model.make_cache(B, L + options.max_new_tokens - 1);
    auto logits = model.decode(prefill.ids.view(), cache, prefill.padding.view());  // [B, L, V]
    Index row_stride = L;  // logits rows per sequence

    std::vector<Generator> rngs;
    for (Index b = 0; b < B; ++b) rngs.emplace_back(options.seed + static_cast<std::uint64_t>(b));
    std::vector<bool> running(static_cast<std::size_t>(B), true);
    Tensor<std::int64_t> step(Shape{B, 1});
    Tensor<bool> step_padding(Shape{B, 1});
    for (Index n = 0;; ++n) {
        bool any = false;
        for (Index b = 0; b < B; ++b) {
            const auto bi = static_cast<std::size_t>(b);
            step.data()[b] = 0;
            step_padding.data()[b] = true;
            if (!running[bi]) continue;
            const std::int64_t next = choose_next_token(
                logits.data() + (b * row_stride + row_stride - 1) * V, V, options, rngs[bi]);
            out[bi].push_back(next);
            const bool stop = std::find(options.stop_tokens.begin(), options.stop_tokens.end(),
                                        next) != options.stop_tokens.end();
            if (stop || n + 1 == options.max_new_tokens) {
                running[bi] = false;
                continue;
            }
            step.data()[b] = next;
            step_padding.data()[b] = false;
            any = true;
        }
        if (!any) break;
        logits = model.decode(step.view(), cache, step_padding.view());  // [B, 1, V]
        row_stride = 1;
    }
    return out;
}

}  // namespace headwise::models
