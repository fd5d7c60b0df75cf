// SPDX-License-Identifier: MIT
// perplexity(): a causal language model's perplexity on a token sequence in windows, as
// llama.cpp's llama-perplexity computes it.
#pragma once

#include <algorithm>  // std::max
#include <cmath>      // std::exp, std::log, std::isfinite
#include <cstdint>    // std::int64_t
#include <optional>   // std::optional
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise::models {

/// How perplexity() cuts and scores the tokens.
struct PerplexityOptions {
    Index context = 512;  // the window (llama-perplexity's --ctx-size); >= 3
    /// When set (the model's tokenizer adds BOS), the first token of every window is replaced by
    /// this id before the window is run, as llama-perplexity does.
    std::optional<std::int64_t> bos_id;
};

/// perplexity()'s result: exp(mean_nll), mean_nll over `scored` predicted tokens in `windows`
/// windows.
struct PerplexityResult {
    double perplexity = 0.0;
    double mean_nll = 0.0;
    Index scored = 0;
    Index windows = 0;
};

/// The perplexity of `model` (forward(ids [1, N]) -> logits [1, N, V], and config().vocab_size:
/// LlamaForCausalLM) on `tokens`, llama.cpp's way (tools/perplexity, its default mode):
///  - the tokens (the text tokenized with BOS when the model adds it) are cut into
///    floor(size / context) windows of `context` tokens, the rest dropped;
///  - each window runs on its own (nothing carried over), its first token replaced by
///    options.bos_id when set;
///  - only the second half is scored: the logits at positions first = context / 2 ..
///    context - 2 predict the window's tokens first + 1 .. context - 1 (the originals), each
///    adding -log softmax(logits)[token], computed in double after subtracting the row maximum;
///  - perplexity = exp(sum / count), count = windows * (context - 1 - context / 2).
/// on_window(w, running) is called after window w (0-based) with the perplexity so far
/// (llama-perplexity prints these as [1]x,[2]y,...).
/// Throws std::invalid_argument, before running the model, for context < 3, fewer than
/// 2 * context tokens (llama-perplexity's requirement), or a token outside [0, vocab_size).
template <class Model, class OnWindow>
PerplexityResult perplexity(Model& model, const std::vector<std::int64_t>& tokens,
                            const PerplexityOptions& options, OnWindow&& on_window);

/// perplexity() without a callback.
template <class Model>
PerplexityResult perplexity(Model& model, const std::vector<std::int64_t>& tokens,
                            const PerplexityOptions& options = {}) {
    return perplexity(model, tokens, options, [](Index, double) {});
}

// ---- definitions ----------------------------------------------------------------------------

template <class Model, class OnWindow>
PerplexityResult perplexity(Model& model, const std::vector<std::int64_t>& tokens,
                            const PerplexityOptions& options, OnWindow&& on_window) {
    constexpr const char* fn = "headwise::models::perplexity";
    const Index n_ctx = options.context;
    if (n_ctx < 3)
        throw_invalid_argument(fn, "options.context",
                               "must be at least 3 (a window's second half, but its last token, "
                               "is scored)",
                               std::to_string(n_ctx));
    const auto n_tokens = static_cast<Index>(tokens.size());
    if (n_tokens / 2 < n_ctx)
        throw_invalid_argument(fn, "tokens",
                               "must number at least 2 * context = " + std::to_string(2 * n_ctx) +
                                   " (llama-perplexity's rule)",
                               std::to_string(n_tokens) + " tokens");
    const Index V = static_cast<Index>(model.config().vocab_size);
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= V)
            throw_invalid_argument(fn, "tokens[" + std::to_string(i) + "]",
                                   "must be in [0, vocab_size = " + std::to_string(V) + ")",
                                   std::to_string(tokens[i]));
    if (options.bos_id && (*options.bos_id < 0 || *options.bos_id >= V))
        throw_invalid_argument(fn, "options.bos_id",
                               "must be in [0, vocab_size = " + std::to_string(V) + ")",
                               std::to_string(*options.bos_id));

    const Index windows = n_tokens / n_ctx;
    const Index first = n_ctx / 2;
    PerplexityResult r;
    double nll = 0.0;
    Tensor<std::int64_t> ids(Shape{1, n_ctx});
    for (Index w = 0; w < windows; ++w) {
        const Index start = w * n_ctx;
        for (Index t = 0; t < n_ctx; ++t)
            ids.data()[t] = tokens[static_cast<std::size_t>(start + t)];
        if (options.bos_id) ids.data()[0] = *options.bos_id;
        const auto logits = model.forward(ids.view());  // [1, n_ctx, V]
        for (Index i = first; i + 1 < n_ctx; ++i) {
            const auto* row = logits.data() + i * V;
            // log softmax(l)[y] = l_y - max - log sum exp(l - max): the maximum subtracted so
            // that no exp overflows.
            double top = static_cast<double>(row[0]);
            for (Index v = 1; v < V; ++v) top = std::max(top, static_cast<double>(row[v]));
            double sum = 0.0;
            for (Index v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - top);
            const auto y = tokens[static_cast<std::size_t>(start + i + 1)];
            nll += -(static_cast<double>(row[y]) - top - std::log(sum));
            ++r.scored;
        }
        on_window(w, std::exp(nll / static_cast<double>(r.scored)));
    }
    r.windows = windows;
    r.mean_nll = nll / static_cast<double>(r.scored);
    r.perplexity = std::exp(r.mean_nll);
    return r;
}

}  // namespace headwise::models
