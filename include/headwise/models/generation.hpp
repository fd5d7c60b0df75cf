// SPDX-License-Identifier: MIT
// generate(): text generation from a causal language model with a KV cache: greedy,
// temperature, top-k and top-p sampling, stop tokens, left-padded prompt batches.
#pragma once

#include <algorithm>    // std::max, std::min, std::stable_sort, std::find
#include <cmath>        // std::exp, std::isfinite, std::isnan
#include <cstdint>      // std::int64_t, std::uint64_t
#include <limits>       // std::numeric_limits
#include <numeric>      // std::iota
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::void_t, std::true_type, std::false_type
#include <utility>      // std::declval
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/number_string.hpp"
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

}  // namespace headwise::models

namespace headwise::detail {

/// Throws std::invalid_argument, naming `fn` and the option, unless temperature, top_k and top_p
/// are in the ranges GenerationOptions gives them (max_new_tokens is generate()'s to check).
inline void check_sampling_options(const char* fn, const models::GenerationOptions& options) {
    if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature))
        throw_invalid_argument(fn, "options.temperature", "must be finite and >= 0",
                               shortest_str(options.temperature));
    if (options.top_k < 0)
        throw_invalid_argument(fn, "options.top_k", "must be >= 0 (0: off)",
                               std::to_string(options.top_k));
    if (!(options.top_p > 0.0 && options.top_p <= 1.0))
        throw_invalid_argument(fn, "options.top_p", "must be in (0, 1]",
                               shortest_str(options.top_p));
}

/// True when Model's config() has a max_position_embeddings (the longest sequence it was
/// trained for), which bounds generate()'s KV cache.
template <class Model, class = void>
struct has_max_position_embeddings : std::false_type {};
template <class Model>
struct has_max_position_embeddings<
    Model, std::void_t<decltype(std::declval<Model&>().config().max_position_embeddings)>>
    : std::true_type {};

/// Whether a causal language model has decode_last (the logits of the last position only),
/// which generate() uses for the prompt.
template <class Model, class = void>
struct has_decode_last : std::false_type {};
template <class Model>
struct has_decode_last<
    Model, std::void_t<decltype(std::declval<Model&>().decode_last(
               std::declval<TensorView<const std::int64_t>>(),
               std::declval<decltype(std::declval<Model&>().make_cache(Index{1}, Index{1}))&>(),
               std::declval<TensorView<const bool>>()))>> : std::true_type {};

}  // namespace headwise::detail

namespace headwise::models {

/// The next token of one sequence from its logits row [V], as generate() chooses it; `rng` is
/// that sequence's generator (drawn once per sampled token, never for greedy). Sampling, in
/// double: the ids are sorted by logit descending (lower id first on equal logits); with
/// top_k > 0 only the first top_k are kept; p = softmax(z) over the kept ids, with
/// z_v = (logits_v - max logit) / temperature (the maximum subtracted before dividing, so that
/// no z overflows however small the temperature: as temperature goes to 0 the mass goes to the
/// highest logits); with top_p < 1 only the shortest prefix of the sorted ids whose p sums to at
/// least top_p is kept (at least one id); then u = uniform01(rng) in [0, 1) and the first kept
/// id whose cumulative p exceeds u times the kept total is chosen. This is transformers' order
/// (temperature, top-k, top-p), not its random stream.
///
/// Throws std::invalid_argument, before drawing, for V < 1, null logits, a logit that is NaN or
/// +inf, no logit above -inf, a temperature that is negative or not finite, top_k < 0 or top_p
/// outside (0, 1].
template <class T, class Rng>
std::int64_t choose_next_token(const T* logits, Index V, const GenerationOptions& options,
                               Rng& rng) {
    constexpr const char* fn = "headwise::models::choose_next_token";
    if (V < 1)
        throw_invalid_argument(fn, "V", "must be positive (the logits row [V])", std::to_string(V));
    if (logits == nullptr) throw_invalid_argument(fn, "logits", "must not be null", "null");
    headwise::detail::check_sampling_options(fn, options);
    Index best = 0;  // the highest logit, the lowest id among equal ones
    for (Index v = 0; v < V; ++v) {
        const double l = static_cast<double>(logits[v]);
        if (std::isnan(l) || l == std::numeric_limits<double>::infinity())
            throw_invalid_argument(fn, "logits[" + std::to_string(v) + "]",
                                   "must be a number below +inf",
                                   headwise::detail::shortest_str(l));
        if (l > static_cast<double>(logits[best])) best = v;
    }
    const double top = static_cast<double>(logits[best]);
    if (top == -std::numeric_limits<double>::infinity())
        throw_invalid_argument(fn, "logits", "must hold a value above -inf",
                               "all " + std::to_string(V) + " are -inf");
    if (options.temperature == 0.0) return best;

    std::vector<Index> order(static_cast<std::size_t>(V));
    std::iota(order.begin(), order.end(), Index{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](Index a, Index b) { return logits[a] > logits[b]; });
    std::size_t kept = order.size();
    if (options.top_k > 0) kept = std::min(kept, static_cast<std::size_t>(options.top_k));
    // softmax(logits / T) = softmax((logits - max) / T): every z <= 0, so exp(z) is in [0, 1]
    // and the top id's is 1, where logits / T alone overflows to inf (inf - inf = NaN) for a
    // tiny T.
    std::vector<double> p(kept);
    double total = 0.0;
    for (std::size_t i = 0; i < kept; ++i) {
        const double z =
            (static_cast<double>(logits[order[i]]) - top) / options.temperature;  // <= 0
        p[i] = std::exp(z);
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
    // u rounded up to the total: the last kept id that has any probability.
    while (kept > 1 && p[kept - 1] == 0.0) --kept;
    return order[kept - 1];
}

/// Generates up to options.max_new_tokens new tokens after each prompt with `model`, a causal
/// language model with make_cache(batch, capacity), decode(ids [B, T], cache, padding [B, T])
/// -> logits [B, T, V] and config().vocab_size (LlamaForCausalLM; a model that also has
/// decode_last, the last position's logits [B, 1, V], gets the prompt's through it). Returns the
/// new ids of each prompt (without the prompt), in prompt order; a sequence ends after
/// max_new_tokens tokens or after a stop token (which is included).
///
/// The prompts (each at least one id) are left-padded to the longest and run as one batch:
/// one prefill decode of all prompt tokens, then one decode step of one token per sequence
/// while any sequence runs (a finished sequence's step token is marked as padding). Positions
/// count only the non-padding tokens, so each prompt gives what it gives alone. Sequence b
/// draws from its own Generator seeded options.seed + b (see choose_next_token), so its tokens
/// depend on the seed and its own logits only. The KV cache holds the longest prompt's L tokens
/// and max_new_tokens - 1 more; when the model's config() has max_position_embeddings (the
/// longest sequence it was trained for), L + max_new_tokens - 1 must not exceed it. Throws
/// std::invalid_argument, before allocating anything, for no prompts, an empty prompt, options
/// out of range, a cache longer than that bound (or than Index can count),
/// std::out_of_range for an id outside the vocabulary.
template <class Model>
std::vector<std::vector<std::int64_t>> generate(
    Model& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const GenerationOptions& options);

/// generate() that also calls on_token(b, id) for each new token as soon as it is chosen
/// (sequence b, in the order the tokens are chosen: within a step by sequence), before the next
/// decode step: what a program needs to print tokens while the model runs. The checks and
/// results are generate()'s; an exception from on_token ends the generation and propagates.
template <class Model, class OnToken>
std::vector<std::vector<std::int64_t>> generate(
    Model& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const GenerationOptions& options, OnToken&& on_token) {
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
    headwise::detail::check_sampling_options(fn, options);
    const Index B = static_cast<Index>(prompts.size());
    const Index V = model.config().vocab_size;
    std::vector<std::vector<std::int64_t>> out(prompts.size());
    if (options.max_new_tokens == 0) return out;
    // The cache holds every token fed to the model: the prompt and all new tokens but the last.
    // Both checks compare max_new_tokens - 1 with a difference, so that nothing overflows.
    if constexpr (headwise::detail::has_max_position_embeddings<Model>::value) {
        const Index limit = static_cast<Index>(model.config().max_position_embeddings);
        if (options.max_new_tokens - 1 > limit - L)
            throw_invalid_argument(fn, "options.max_new_tokens",
                                   "the longest prompt (" + std::to_string(L) +
                                       " tokens) + max_new_tokens - 1 must be at most the "
                                       "model's config().max_position_embeddings = " +
                                       std::to_string(limit),
                                   std::to_string(options.max_new_tokens));
    }
    if (options.max_new_tokens - 1 > std::numeric_limits<Index>::max() - L)
        throw_invalid_argument(fn, "options.max_new_tokens",
                               "must keep the prompt length " + std::to_string(L) +
                                   " + max_new_tokens - 1 representable",
                               std::to_string(options.max_new_tokens));
    const Index capacity = L + (options.max_new_tokens - 1);  // checked just above

    // Prefill: the prompts left-padded (padding id 0, masked) in one decode.
    const LeftPaddedBatch prefill = left_pad(prompts);
    auto cache = model.make_cache(B, capacity);
    // [B, L, V], or [B, 1, V] from a model that computes the last position's logits alone.
    Index row_stride = L;  // logits rows per sequence
    auto logits = [&] {
        if constexpr (headwise::detail::has_decode_last<Model>::value) {
            row_stride = 1;
            return model.decode_last(prefill.ids.view(), cache, prefill.padding.view());
        } else {
            return model.decode(prefill.ids.view(), cache, prefill.padding.view());
        }
    }();

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
            on_token(b, next);
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

template <class Model>
std::vector<std::vector<std::int64_t>> generate(
    Model& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const GenerationOptions& options) {
    return generate(model, prompts, options, [](Index, std::int64_t) {});
}

}  // namespace headwise::models
