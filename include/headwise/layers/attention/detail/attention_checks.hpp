// SPDX-License-Identifier: MIT
// The argument checks of MultiheadAttention's forward and decode, run before anything changes.
#pragma once

#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string

#include "../../../config.hpp"
#include "../../../error.hpp"
#include "../../../shape.hpp"
#include "../../../tensor.hpp"
#include "../kv_cache.hpp"
#include "../options.hpp"
#include "attention_options.hpp"
#include "in_proj_layout.hpp"

namespace headwise::detail {

/// The sizes of a forward call: B batches of L queries over S keys (before the appended ones).
struct CallSizes {
    Index B = 0, L = 0, S = 0;
};

/// Throws shape_error unless `gates` (absent: a default-constructed tensor, [0]) is [H] or
/// [B, H].
template <class Gates>
void check_head_mask(const char* fn, const char* argument, const Gates& gates, Index H, Index B) {
    if (gates.shape() == Shape{0}) return;
    if (gates.shape() != Shape{H} && gates.shape() != Shape{B, H})
        throw shape_error(fn, argument, Shape{H}.str() + " or " + Shape{B, H}.str(), gates.shape());
}

/// Checks forward's masks for H heads, B batches, L queries, S keys: attn_mask and attn_bias
/// [L, S] or [B, H, L, S], key_padding_mask [B, S] ([S] unbatched).
template <class T>
void check_masks(const AttentionMasks<T>& m, Index H, Index B, Index L, Index S, bool batched) {
    constexpr const char* fn = "headwise::MultiheadAttention::forward";
    const Shape ls{L, S};
    const Shape bhls{B, H, L, S};
    const auto two = [&] { return ls.str() + " or " + bhls.str(); };
    // Only an absent (default-constructed) mask means none; an empty one of another shape is an
    // error like any wrong shape.
    if (!mask_absent(m.attn_mask) && m.attn_mask.shape() != ls && m.attn_mask.shape() != bhls)
        throw shape_error(fn, "masks.attn_mask", two(), m.attn_mask.shape());
    if (!mask_absent(m.attn_bias) && m.attn_bias.shape() != ls && m.attn_bias.shape() != bhls)
        throw shape_error(fn, "masks.attn_bias", two(), m.attn_bias.shape());
    if (!mask_absent(m.key_padding_mask)) {
        const Shape expected = batched ? Shape{B, S} : Shape{S};
        check_shape(fn, "masks.key_padding_mask", m.key_padding_mask.shape(), expected);
    }
    check_head_mask(fn, "masks.head_mask", m.head_mask, H, B);
    if (m.head_mask_grad.data() != nullptr) {
        if (mask_absent(m.head_mask))
            check_head_mask(fn, "masks.head_mask_grad", m.head_mask_grad, H, B);
        else
            check_shape(fn, "masks.head_mask_grad", m.head_mask_grad.shape(), m.head_mask.shape());
    }
}

/// Checks forward's arguments against `layout`: query [B, L, E] (or [L, E]), key [B, S, kdim],
/// value [B, S, vdim], the masks; throws shape_error naming the first that does not fit.
template <class T>
CallSizes check_forward_arguments(const InProjLayout& layout, TensorView<const T> query,
                                  TensorView<const T> key, TensorView<const T> value,
                                  const AttentionMasks<T>& masks) {
    constexpr const char* fn = "headwise::MultiheadAttention::forward";
    const Index E = layout.E, kdim = layout.kdim, vdim = layout.vdim;
    const auto e = [E] { return std::to_string(E); };
    if (query.rank() != 2 && query.rank() != 3)
        throw shape_error(fn, "query", "[B, L, " + e() + "] or [L, " + e() + "]", query.shape());
    const bool batched = query.rank() == 3;
    if (query.shape().back() != E)
        throw shape_error(fn, "query", batched ? "[B, L, " + e() + "]" : "[L, " + e() + "]",
                          query.shape());
    const Index B = batched ? query.size(0) : 1;
    const Index L = query.size(-2);
    if (key.rank() != query.rank() || (batched && key.size(0) != B) || key.shape().back() != kdim) {
        const std::string lead = batched ? "[" + std::to_string(B) + ", " : "[";
        throw shape_error(fn, "key", lead + "S, " + std::to_string(kdim) + "]", key.shape());
    }
    const Index S = key.size(-2);
    if (batched) {
        check_shape(fn, "value", value.shape(), Shape{B, S, vdim});
    } else {
        check_shape(fn, "value", value.shape(), Shape{S, vdim});
    }
    check_masks(masks, layout.H, B, L, S, batched);
    // The scores [B, H, L, S + 2] (at most two appended keys) must be countable: Shape checks.
    static_cast<void>(Shape{B, layout.H, L, S + 2});
    return CallSizes{B, L, S};
}

/// Checks decode's arguments: eval mode, a cache made for `layout`, x_new [B, T, E] (or [T, E]
/// with a batch-1 cache) with T >= 1 tokens that fit the cache, out of x_new's shape, key_padding
/// [B, T] ([T]) and head_mask [H] or [B, H] when given. Throws std::invalid_argument or
/// shape_error naming the first.
template <class T>
void check_decode_arguments(const InProjLayout& layout, bool training, TensorView<const T> x_new,
                            const KVCache<T>& cache, TensorView<T> out,
                            TensorView<const bool> key_padding, TensorView<const T> head_mask) {
    constexpr const char* fn = "headwise::MultiheadAttention::decode";
    const Index E = layout.E, D = layout.D, Hkv = layout.kv_heads;
    if (training)
        throw std::invalid_argument(std::string(fn) +
                                    ": the module is in training mode; decode runs in eval mode, "
                                    "call eval() first");
    if (cache.capacity() == 0 || cache.embed_dim() != E || cache.num_kv_heads() != Hkv ||
        cache.head_dim() != D)
        throw std::invalid_argument(
            std::string(fn) + ": cache: made for embed_dim " + std::to_string(cache.embed_dim()) +
            " with " + std::to_string(cache.num_kv_heads()) + " key/value heads of " +
            std::to_string(cache.head_dim()) + " features (capacity " +
            std::to_string(cache.capacity()) + "); this module needs embed_dim " +
            std::to_string(E) + " with " + std::to_string(Hkv) + " of " + std::to_string(D) +
            ": make it with this module's make_kv_cache");
    const Index B = cache.batch();
    const bool batched = x_new.rank() == 3;
    if (!(batched || (x_new.rank() == 2 && B == 1)) || x_new.shape().back() != E ||
        (batched && x_new.size(0) != B) || x_new.size(-2) < 1) {
        const std::string e = std::to_string(E);
        throw shape_error(fn, "x_new",
                          B == 1 ? "[1, T, " + e + "] or [T, " + e + "]"
                                 : "[" + std::to_string(B) + ", T, " + e + "]",
                          x_new.shape());
    }
    const Index Tn = x_new.size(-2);  // new tokens
    check_shape(fn, "out", out.shape(), x_new.shape());
    if (key_padding.data() != nullptr)
        check_shape(fn, "key_padding", key_padding.shape(), batched ? Shape{B, Tn} : Shape{Tn});
    if (head_mask.data() != nullptr) check_head_mask(fn, "head_mask", head_mask, layout.H, B);
    if (Tn > cache.capacity() - cache.size())
        throw std::invalid_argument(std::string(fn) + ": x_new: " + std::to_string(Tn) +
                                    " new tokens do not fit the cache, which holds " +
                                    std::to_string(cache.size()) + " of capacity " +
                                    std::to_string(cache.capacity()));
}

}  // namespace headwise::detail
