// SPDX-License-Identifier: MIT
// Per-layer head masks, per-head attention maps and head pruning at the model level (Hugging
// Face's head_mask, output_attentions and prune_heads), shared by BertModel and LlamaModel.
#pragma once

#include <algorithm>  // std::count_if, std::find, std::sort
#include <cstddef>    // std::size_t
#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise::models {

/// What a model's forward does with its heads, beside computing the hidden states.
template <class T>
struct HeadOptions {
    /// Hugging Face's head_mask: [N, H] (layer n's gate of head h) or [H] (the same gates in
    /// every layer), or empty for none. Multiplies each head's attention probabilities, hence its
    /// output before the out-projection (AttentionMasks::head_mask): 0 removes the head, 1 keeps
    /// it. Needs every layer to have the same number of heads (a model pruned unevenly takes
    /// none).
    TensorView<const T> head_mask;
    /// Return each layer's per-head attention probabilities (Hugging Face's output_attentions,
    /// torch's average_attn_weights=False), gated by head_mask. Off: they are never formed.
    bool output_attentions = false;
};

/// What a model's forward with HeadOptions returns.
template <class T>
struct ModelOutput {
    Tensor<T> last_hidden_state;  // [B, L, E] ([L, E] for unbatched input ids)
    /// With output_attentions, one tensor per layer, [B, H_n, L, L] (B = 1 for unbatched input
    /// ids; H_n the layer's heads); empty otherwise.
    std::vector<Tensor<T>> attentions;
};

/// The heads to prune, per layer: {layer: [head, ...]}, Hugging Face's prune_heads argument.
/// Head indices are those of the unpruned model (heads pruned before keep their numbers).
using HeadsToPrune = std::map<Index, std::vector<Index>>;

}  // namespace headwise::models

namespace headwise::detail {

/// Checks a model's head_mask against its layers' head counts: [N, H] or [H], with every layer
/// having H heads. Throws shape_error / std::invalid_argument naming `fn` and "heads.head_mask".
template <class T>
void check_model_head_mask(const char* fn, TensorView<const T> head_mask,
                           const std::vector<Index>& heads_per_layer) {
    if (head_mask.data() == nullptr || head_mask.numel() == 0) return;
    const Index N = static_cast<Index>(heads_per_layer.size());
    const Index H = heads_per_layer.empty() ? 0 : heads_per_layer.front();
    for (std::size_t n = 0; n < heads_per_layer.size(); ++n)
        if (heads_per_layer[n] != H)
            throw_invalid_argument(
                fn, "heads.head_mask",
                "needs every layer to have the same number of heads (layer 0 has " +
                    std::to_string(H) + " after prune_heads)",
                "layer " + std::to_string(n) + " with " + std::to_string(heads_per_layer[n]));
    const bool ok = (head_mask.rank() == 1 && head_mask.size(0) == H) ||
                    (head_mask.rank() == 2 && head_mask.size(0) == N && head_mask.size(1) == H);
    if (!ok)
        throw shape_error(
            fn, "heads.head_mask",
            "[" + std::to_string(N) + ", " + std::to_string(H) + "] or [" + std::to_string(H) + "]",
            head_mask.shape());
}

/// Layer `layer`'s gates [H] from a checked head_mask, as AttentionMasks::head_mask takes them;
/// an empty tensor when there is no head_mask.
template <class T>
Tensor<T> layer_head_mask(TensorView<const T> head_mask, Index layer) {
    if (head_mask.data() == nullptr || head_mask.numel() == 0) return Tensor<T>();
    const Index H = head_mask.size(-1);
    Tensor<T> gates(Shape{H});
    const T* row = head_mask.data() + (head_mask.rank() == 2 ? layer * H : Index{0});
    std::copy_n(row, H, gates.data());
    return gates;
}

/// Turns {layer: [head, ...]} in the unpruned model's numbering into each layer's heads in its
/// current numbering (what MultiheadAttention::prune_heads takes), checking everything first:
/// a layer in [0, N), heads in [0, H), none listed twice, none pruned before, at least one head
/// left in each layer, and with grouped-query attention (Hkv < H) the groups that keep heads
/// keeping equally many. `pruned` holds each layer's heads pruned before (unpruned numbering).
/// Throws std::invalid_argument naming `fn`, the argument, what was expected and what it got.
inline std::map<Index, std::vector<Index>> plan_head_pruning(
    const std::string& fn, const models::HeadsToPrune& heads, Index N, Index H, Index Hkv,
    const std::map<Index, std::vector<Index>>& pruned) {
    std::map<Index, std::vector<Index>> plan;
    for (const auto& [layer, list] : heads) {
        if (layer < 0 || layer >= N)
            throw_invalid_argument(fn, "heads", "layers in [0, " + std::to_string(N) + ")",
                                   "layer " + std::to_string(layer));
        const std::string arg = "heads[" + std::to_string(layer) + "]";
        const auto before_it = pruned.find(layer);
        const std::vector<Index> none;
        const std::vector<Index>& before = before_it == pruned.end() ? none : before_it->second;
        std::vector<bool> gone(static_cast<std::size_t>(H), false);
        for (Index h : before) gone[static_cast<std::size_t>(h)] = true;
        std::vector<bool> listed(static_cast<std::size_t>(H), false);
        for (Index h : list) {
            if (h < 0 || h >= H)
                throw_invalid_argument(fn, arg, "heads in [0, " + std::to_string(H) + ")",
                                       "head " + std::to_string(h));
            if (listed[static_cast<std::size_t>(h)])
                throw_invalid_argument(fn, arg, "each head listed once",
                                       "head " + std::to_string(h) + " twice");
            if (gone[static_cast<std::size_t>(h)])
                throw_invalid_argument(fn, arg, "heads not pruned before",
                                       "head " + std::to_string(h) + ", pruned already");
            listed[static_cast<std::size_t>(h)] = true;
        }
        if (list.empty()) continue;
        // What stays: at least one head, and (grouped-query) equal groups.
        const Index G = H / Hkv;  // query heads per key/value head
        std::vector<Index> left(static_cast<std::size_t>(Hkv), 0);
        Index total = 0;
        for (Index h = 0; h < H; ++h)
            if (!gone[static_cast<std::size_t>(h)] && !listed[static_cast<std::size_t>(h)]) {
                ++left[static_cast<std::size_t>(h / G)];
                ++total;
            }
        if (total == 0)
            throw_invalid_argument(fn, arg,
                                   "at least one of the layer's " +
                                       std::to_string(H - static_cast<Index>(before.size())) +
                                       " heads left",
                                   "every head");
        Index group = 0;
        for (Index kv = 0; kv < Hkv; ++kv) {
            const Index n = left[static_cast<std::size_t>(kv)];
            if (n == 0) continue;
            if (group != 0 && n != group)
                throw_invalid_argument(
                    fn, arg,
                    "the key/value heads that remain keeping equally many query heads (groups of " +
                        std::to_string(G) + ")",
                    std::to_string(group) + " and " + std::to_string(n) + " (key/value head " +
                        std::to_string(kv) + ")");
            group = n;
        }
        // Current numbering: a head's index minus the heads before it pruned already.
        std::vector<Index>& now = plan[layer];
        for (Index h : list)
            now.push_back(h - static_cast<Index>(std::count_if(before.begin(), before.end(),
                                                               [&](Index p) { return p < h; })));
    }
    return plan;
}

/// `pruned` after a plan_head_pruning() plan was applied with `heads`: each layer's heads, sorted.
inline void record_pruned_heads(std::map<Index, std::vector<Index>>& pruned,
                                const models::HeadsToPrune& heads) {
    for (const auto& [layer, list] : heads) {
        if (list.empty()) continue;
        std::vector<Index>& p = pruned[layer];
        p.insert(p.end(), list.begin(), list.end());
        std::sort(p.begin(), p.end());
    }
}

}  // namespace headwise::detail

// Not compiled into headwise::compiled (detail/compiled_templates.hpp), having no member defined
// outside the class: not compiled: HeadOptions (a mask and a flag); not compiled: ModelOutput
// (tensors).
