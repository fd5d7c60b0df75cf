// SPDX-License-Identifier: MIT
// AttentionCall: the record of one attention call (geometry, scale, kernel, tiles, dropout), and
// describe_call, the one function that builds it.
#pragma once

#include "../../../config.hpp"
#include "../../../ops/blocked_attention.hpp"
#include "../../../ops/dropout.hpp"
#include "../options.hpp"
#include "attention_options.hpp"
#include "projection_plan.hpp"

namespace headwise::detail {

/// The kernel that attends each (batch, head) slice of a call.
enum class SliceKernel {
    materialised,  // ops/attention.hpp: P [L, Sx] whole; training keeps it for backward
    blocked,       // ops/blocked_attention.hpp: tile by tile, one log-sum-exp per query row
    cached,        // ops/cached_attention.hpp: decode's few new queries over the cached keys
};

/// Most scores per (batch, head) slice for which AttentionKernel::automatic runs the materialised
/// kernel; above, the blocked one. Up to here an [L, Sx] slice is at most 1 MiB in float, small
/// enough to stay in cache, and the materialised backward does one product fewer than the blocked
/// one; beyond, the [B, H, L, Sx] probabilities that training would keep grow with the square of
/// the length.
inline constexpr Index kMaterialisedMaxScores = 512 * 512;

/// What one call is: the geometry with the extended key count, the scale, the kernel, the tiles,
/// the dropout and the rotary embedding. Built by describe_call only, so that forward, backward and
/// decode agree on every one of them.
template <class T>
struct AttentionCall {
    AttentionGeometry geometry;  // B, L, S; Sx = S + the appended keys (bias_k, the zero key)
    Index appended_keys = 0;     // Sx - S: bias_k / bias_v, then the zero-attention key
    T scale = T(0);              // options.scale, or 1 / sqrt(D)
    SliceKernel kernel = SliceKernel::materialised;
    ops::AttentionTiles tiles;  // the blocked kernel's, cut to the call's L x Sx
    ops::Dropout dropout;       // inactive in eval mode and in decode
    RotaryEmbedding rotary;     // options.rotary: when enabled, Q and K are rotated (step 1b)

    bool blocked() const noexcept { return kernel == SliceKernel::blocked; }
};

/// What a call does besides its sizes.
enum class CallKind {
    forward,  // forward (and the backward that follows it): materialised or blocked kernel
    decode,   // decode: the cached kernel, over the S keys the cache holds after the append
};

/// The record of a call of B batches of L queries over S keys (before the appended ones) under
/// `options`. The kernel: decode's cached one; else options.attention_kernel when it forces one;
/// else blocked for slices of more than kMaterialisedMaxScores scores unless the weights are
/// asked for (the blocked kernel would compute them again). `dropout` is the call's (drawn by
/// the module: only a training forward has one).
template <class T>
AttentionCall<T> describe_call(const MultiheadAttentionOptions& options, Index B, Index L, Index S,
                               bool need_weights, CallKind kind, ops::Dropout dropout = {}) {
    AttentionCall<T> call;
    call.appended_keys = (options.add_bias_kv ? 1 : 0) + (options.add_zero_attn ? 1 : 0);
    call.geometry = AttentionGeometry{B, L, S, S + call.appended_keys};
    call.scale = attention_scale<T>(options);
    const Index Sx = call.geometry.Sx;
    if (kind == CallKind::decode)
        call.kernel = SliceKernel::cached;
    else if (options.attention_kernel == AttentionKernel::blocked)
        call.kernel = SliceKernel::blocked;
    else if (options.attention_kernel == AttentionKernel::materialised)
        call.kernel = SliceKernel::materialised;
    else
        call.kernel = !need_weights && L * Sx > kMaterialisedMaxScores ? SliceKernel::blocked
                                                                       : SliceKernel::materialised;
    call.tiles = call_tiles(options.attention_tiles, L, Sx);
    call.dropout = dropout;
    call.rotary = options.rotary;
    return call;
}

}  // namespace headwise::detail
