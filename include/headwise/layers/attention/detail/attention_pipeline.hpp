// SPDX-License-Identifier: MIT
// The steps of multi-head attention, shared by MultiheadAttention's forward, backward and decode:
// 1. project (1b. rotate Q and K with RoPE), 2. append the extra keys, 3. attend, 4. project out;
// each with its backward.
#pragma once

#include <Eigen/Core>

#include <algorithm>    // std::max
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <type_traits>  // std::is_same_v, std::remove_const_t
#include <utility>      // std::move
#include <vector>       // std::vector

#include "../../../bf16.hpp"
#include "../../../config.hpp"
#include "../../../detail/parallel.hpp"
#include "../../../ops/attention.hpp"
#include "../../../ops/blocked_attention.hpp"
#include "../../../ops/cached_attention.hpp"
#include "../../../ops/gemm_bf16.hpp"
#include "../../../ops/linear.hpp"
#include "../../../ops/rope.hpp"
#include "../../../ops/score_mask.hpp"
#include "../../../precision.hpp"
#include "../../../shape.hpp"
#include "../../../tensor.hpp"
#include "../../weight_matrix.hpp"
#include "../kv_cache.hpp"
#include "../options.hpp"
#include "attention_buffers.hpp"
#include "attention_call.hpp"
#include "in_proj_layout.hpp"
#include "projection_plan.hpp"

namespace headwise::detail {

/// [B, N, F] or [N, F] -> [B N, F].
inline Shape merge_rows(const Shape& s) { return Shape{s.numel() / s.back(), s.back()}; }

/// A module's parameters as the steps read them (P = T) or its gradients as backward adds into
/// them (P = T, written), in the packed layout `layout` describes. Absent ones are null.
template <class P>
struct AttentionParameters {
    using T = std::remove_const_t<P>;
    InProjLayout layout;
    P* w_in = nullptr;       // [H D + 2 Hkv D, ...]: Wq | Wk | Wv
    P* b_in = nullptr;       // [H D + 2 Hkv D], null without bias
    P* w_out = nullptr;      // [E, H D]
    P* b_out = nullptr;      // [E], null without bias
    P* bias_k = nullptr;     // [Hkv D], null without add_bias_kv
    P* bias_v = nullptr;     // [Hkv D]
    bool zero_attn = false;  // the zero key and value come last
    // The holders of w_in and w_out (parameters, not gradients): steps 1 and 4 multiply
    // through them, in whatever format they hold the weights (WeightMatrix::forward_block: float,
    // bf16 copies, stored types), with buffers of the call's own (so that decodes of different
    // caches through one module may run at once). The attention products (step 3), softmax and
    // the extra keys stay float.
    const WeightMatrix<T>* in_holder = nullptr;
    const WeightMatrix<T>* out_holder = nullptr;
    // Precision::bf16 (float modules): w_in and w_out as bf16 copies, which the backwards of
    // steps 1 and 4 multiply by (mixed-precision training). Null in float.
    const BFloat16* w_in_bf16 = nullptr;   // [H D + 2 Hkv D, ...], as w_in
    const BFloat16* w_out_bf16 = nullptr;  // [E, H D]

    /// GEMM gm's weight W [w_rows, in], a row block of w_in.
    MatrixMap<P> in_weight(const ProjectionGemm& gm) const {
        return MatrixMap<P>(w_in + gm.w_offset, gm.w_rows, gm.in);
    }
    MatrixMap<P> out_weight() const { return MatrixMap<P>(w_out, layout.E, layout.inner()); }
    /// Key/value head h's [1, D] slice of bias_k (or bias_v).
    MatrixMap<P> bias_k_row(Index h) const {
        return MatrixMap<P>(bias_k + h * layout.D, 1, layout.D);
    }
    MatrixMap<P> bias_v_row(Index h) const {
        return MatrixMap<P>(bias_v + h * layout.D, 1, layout.D);
    }
};

// ---- 1. project: Q = Xq Wq^T + bq, K = Xk Wk^T + bk, V = Xv Wv^T + bv, by the plan's GEMMs ----

template <class T>
void project(const AttentionParameters<const T>& params, const TensorView<const T> (&x)[3],
             ProjectionBuffers<T>& y) {
    for (const ProjectionGemm& gm : y.plan().gemms)
        params.in_holder->forward_block(x[gm.input].matrix(), gm.w_offset, gm.w_rows, gm.in,
                                        params.b_in ? params.b_in + gm.b_offset : nullptr, y.y(gm),
                                        /*current=*/false);
}

/// Which input gradients project_backward computes.
struct InputGradients {
    bool asked[3] = {true, true, true};  // dX_i for input i
    bool combined = false;               // self-attention: dX_q + dX_k + dX_v into dx[kQuery]
};

/// Backward of project: dW += dY^T X and db += sum dY per GEMM; dX_i [B N_i, in_i] into dx[i]
/// for the inputs asked for. Segments side by side in one GEMM's output that go to one gradient
/// are one product (dX = dY [B L, 3E] W [3E, E] when fused and combined), not three passes.
template <class T>
void project_backward(const AttentionParameters<const T>& params,
                      const AttentionParameters<T>& grads, const TensorView<const T> (&x)[3],
                      ProjectionBuffers<T>& dy, const InputGradients& which, Tensor<T> (&dx)[3]) {
    auto into = [&](int input) { return which.combined ? static_cast<int>(kQuery) : input; };
    for (int i : {kQuery, kKey, kValue})
        if (which.asked[i] && into(i) == i) dx[i] = Tensor<T>(x[i].shape());
    // bf16 (mixed-precision training): dY, X and the weight enter the products in bf16 (dY
    // rounded once per GEMM, each input once per call); the products accumulate in float into
    // the float gradients.
    [[maybe_unused]] ops::Bf16BackwardWorkspace bf16;
    [[maybe_unused]] std::vector<BFloat16> x16[3];  // input i rounded, when a GEMM first reads it
    for (const ProjectionGemm& gm : dy.plan().gemms) {
        const StridedMatrixMap<T> dY = dy.y(gm);  // [B N, w_rows]
        [[maybe_unused]] ops::ConstBf16Matrix dY16, W16;
        bool in_bf16 = false;
        if constexpr (std::is_same_v<T, float>) {
            if (params.w_in_bf16) {
                in_bf16 = true;
                dY16 = ops::rounded_to_bf16(dY, bf16.dy);
                W16 = ops::ConstBf16Matrix(params.w_in_bf16 + gm.w_offset, gm.w_rows, gm.in);
                std::vector<BFloat16>& xi = x16[gm.input];
                if (xi.empty()) ops::rounded_to_bf16(x[gm.input].matrix(), xi);
                const ops::ConstBf16Matrix X16(xi.data(), x[gm.input].shape()[0],
                                               x[gm.input].shape()[1]);
                ops::linear_backward_weight_bf16(dY16, X16, grads.in_weight(gm), bf16.gemm);
            }
        }
        if (!in_bf16) ops::linear_backward_weight<T>(dY, x[gm.input].matrix(), grads.in_weight(gm));
        if (grads.b_in) ops::linear_backward_bias<T>(dY, grads.b_in + gm.b_offset);
        // dX_i += dY[:, row0 .. row0 + rows) W[row0 .. row0 + rows, :]
        const auto input_gradient = [&](Index row0, Index rows, MatrixRef<T> dX) {
            if constexpr (std::is_same_v<T, float>) {
                if (in_bf16) {
                    ops::linear_backward_input_bf16(dY16.middle_cols(row0, rows),
                                                    W16.middle_rows(row0, rows), dX, bf16.gemm);
                    return;
                }
            }
            ops::linear_backward_input<T>(dY.middleCols(row0, rows),
                                          params.in_weight(gm).middleRows(row0, rows), dX);
        };
        for (std::size_t s = 0; s < gm.segments.size();) {
            const Segment& first = gm.segments[s];
            Index rows = first.rows;
            std::size_t next = s + 1;
            while (next < gm.segments.size() && gm.segments[next].rows > 0 &&
                   into(gm.segments[next].input) == into(first.input) &&
                   gm.segments[next].row0 == first.row0 + rows)
                rows += gm.segments[next++].rows;
            if (rows > 0 && which.asked[first.input])
                input_gradient(first.row0, rows, dx[into(first.input)].matrix());
            s = next;
        }
    }
}

// ---- 1b. rotate: Q_bh = RoPE(Q_bh), K_bh = RoPE(K_bh), each row at its token's position -------
// Rotary position embeddings (Su et al. 2021), when options.rotary is enabled: every query head's
// and every key/value head's block is rotated in place in the projection buffers, the same way
// whichever projection wrote them. The values are not rotated, nor are the keys step 2 appends.

/// Rotates (forward) or rotates back (backward) the query block of every head and the key block
/// of every key/value head in `y`, [rows, D] each: row r of batch b's blocks by the angles of row
/// first_row(b) + r of Cos, Sin.
template <class T, class FirstRow>
void rotate_blocks(ProjectionBuffers<T>& y, const InProjLayout& layout, Index B,
                   RopeConvention convention, bool backward, ConstMatrixRef<T> Cos,
                   ConstMatrixRef<T> Sin, FirstRow first_row) {
    const Index H = layout.H, Hkv = layout.kv_heads;
    const auto rotate_block = [&](Index task) {
        const Index b = task / (H + Hkv), head = task % (H + Hkv);
        const StridedMatrixMap<T> X =  // [rows, D]: Q_bh, or K_bh of key/value head head - H
            head < H ? y.block(kQuery, b, head) : y.block(kKey, b, head - H);
        const Index rows = X.rows(), r0 = first_row(b);
        if (backward)
            ops::rope_backward<T>(X, Cos.middleRows(r0, rows), Sin.middleRows(r0, rows), convention,
                                  X);
        else
            ops::rope_forward<T>(X, Cos.middleRows(r0, rows), Sin.middleRows(r0, rows), convention,
                                 X);
    };
    // A pass over memory: threads only when each gets kParallelGrain elements (a decode step's
    // few rows stay on the calling thread).
    const AttentionGeometry& g = y.plan().key.g;
    const Index per_block = std::max<Index>(1, std::max(g.L, g.S) * layout.D);
    parallel_blocks(B * (H + Hkv), std::max<Index>(1, kParallelGrain / per_block),
                    [&](Index first, Index count) {
                        for (Index task = first; task < first + count; ++task) rotate_block(task);
                    });
}

/// Step 1b of a forward call: query i at position i, key j at position j (tables of positions
/// [0, max(L, S)), kept in `acts` for the backward).
template <class T>
void rotate(ForwardActivations<T>& acts, const InProjLayout& layout) {
    const RotaryEmbedding& r = acts.call.rotary;
    ops::rope_tables<T>(Index{0}, r.theta, r.scaling_factor, r.scaling, acts.rope_cos(),
                        acts.rope_sin());
    rotate_blocks<T>(acts.projection, layout, acts.call.geometry.B, r.convention, false,
                     acts.rope_cos(), acts.rope_sin(), [](Index) { return Index{0}; });
}

/// Backward of step 1b: dQ_bh and dK_bh rotated back (the transposed rotation), in place, before
/// the projection's backward reads them.
template <class T>
void rotate_backward(ForwardActivations<T>& acts, ActivationGradients<T>& grads,
                     const InProjLayout& layout) {
    const RotaryEmbedding& r = acts.call.rotary;
    rotate_blocks<T>(grads.projection, layout, acts.call.geometry.B, r.convention, true,
                     acts.rope_cos(), acts.rope_sin(), [](Index) { return Index{0}; });
}

/// Step 1b of decode, before the new keys join the cache (which holds rotated keys): new token t
/// of sequence b is at position cache.position(b) plus the non-padding new tokens before it, so
/// that padding, left or anywhere, shifts no real token's position. `key_padding` [B, T] as
/// decode's (null data: none).
template <class T>
void rotate_new_tokens(const AttentionCall<T>& call, const InProjLayout& layout,
                       const KVCache<T>& cache, TensorView<const bool> key_padding,
                       DecodeBuffers<T>& buffers) {
    const Index B = call.geometry.B, Tn = call.geometry.L;
    const bool* padding = key_padding.data();  // [B, T] or null
    Index* positions = buffers.positions();    // [B T]
    for (Index b = 0; b < B; ++b) {
        Index position = cache.position(b);
        for (Index t = 0; t < Tn; ++t) {
            positions[b * Tn + t] = position;
            if (!(padding && padding[b * Tn + t])) ++position;
        }
    }
    const RotaryEmbedding& r = call.rotary;
    ops::rope_tables<T>(positions, r.theta, r.scaling_factor, r.scaling, buffers.rope_cos(),
                        buffers.rope_sin());
    rotate_blocks<T>(buffers.projection, layout, B, r.convention, false, buffers.rope_cos(),
                     buffers.rope_sin(), [Tn](Index b) { return b * Tn; });
}

// ---- 2. append the extra keys: K' = [K; bias_k; 0], V' = [V; bias_v; 0] (torch's order) --------

/// K' [S + extra, D] and V' from key/value head h's K [S, D] and V: bias_k / bias_v, then the
/// zero-attention key and value, as `params` has them.
template <class T>
void append_keys(const AttentionParameters<const T>& params, Index h, ConstMatrixRef<T> K,
                 ConstMatrixRef<T> V, MatrixRef<T> Kx, MatrixRef<T> Vx) {
    const Index S = K.rows();
    Kx.topRows(S) = K;
    Vx.topRows(S) = V;
    if (params.bias_k) {
        Kx.row(S) = params.bias_k_row(h);
        Vx.row(S) = params.bias_v_row(h);
    }
    if (params.zero_attn) {
        Kx.row(Kx.rows() - 1).setZero();
        Vx.row(Vx.rows() - 1).setZero();
    }
}

/// Backward of append_keys: the projected rows pass their gradient on (dK += dK'[0, S)), bias_k
/// and bias_v collect theirs; the zero row has no parameter.
template <class T>
void append_keys_backward(const AttentionParameters<T>& grads, Index h, ConstMatrixRef<T> dKx,
                          ConstMatrixRef<T> dVx, MatrixRef<T> dK, MatrixRef<T> dV) {
    const Index S = dK.rows();
    dK += dKx.topRows(S);
    dV += dVx.topRows(S);
    if (grads.bias_k) {
        grads.bias_k_row(h) += dKx.row(S);
        grads.bias_v_row(h) += dVx.row(S);
    }
}

/// Step 2 of a forward call, over every (batch, key/value head).
template <class T>
void append_keys(const AttentionParameters<const T>& params, ForwardActivations<T>& acts) {
    for (Index b = 0; b < acts.call.geometry.B; ++b)
        for (Index h = 0; h < params.layout.kv_heads; ++h)
            append_keys<T>(params, h, acts.k_projected(b, h), acts.v_projected(b, h), acts.k(b, h),
                           acts.v(b, h));
}

/// Backward of step 2 of a forward call, over every (batch, key/value head).
template <class T>
void append_keys_backward(const AttentionParameters<T>& grads, ActivationGradients<T>& dacts) {
    const AttentionGeometry& g = dacts.geometry();
    for (Index b = 0; b < g.B; ++b)
        for (Index h = 0; h < grads.layout.kv_heads; ++h)
            append_keys_backward<T>(grads, h, dacts.k(b, h), dacts.v(b, h), dacts.k_projected(b, h),
                                    dacts.v_projected(b, h));
}

// ---- 3. attend: O = dropout(softmax(scale Q K^T + mask)) V, per (batch, head) slice -----------

/// One slice's scratch: which pointers a kernel uses depends on it.
template <class T>
struct SliceScratch {
    T* p = nullptr;        // materialised: P [L, Sx] out; cached: P [R, Sx] scratch
    T* dropped = nullptr;  // materialised: A [L, Sx] out (P itself without dropout)
    T* tiles = nullptr;    // blocked: the per-thread tile scratch
    T* lse = nullptr;      // blocked: LSE [L] out
};

/// Attention of one slice's Q [R, D] over K, V [Sx, D] into O [R, D], by the call's kernel.
template <class T>
void attend(const AttentionCall<T>& call, ConstMatrixRef<T> Q, ConstMatrixRef<T> K,
            ConstMatrixRef<T> V, const ops::ScoreMask<T>& mask, std::uint64_t stream,
            const SliceScratch<T>& scratch, MatrixRef<T> O) {
    const Index R = Q.rows(), Sx = K.rows();
    switch (call.kernel) {
        case SliceKernel::blocked:
            ops::blocked_attention_forward<T>(
                Q, K, V, mask, call.scale, call.dropout, stream, call.tiles, scratch.tiles,
                Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(scratch.lse, R), O);
            break;
        case SliceKernel::materialised:
            ops::attention_forward<T>(Q, K, V, mask, call.scale, call.dropout, stream,
                                      MatrixMap<T>(scratch.p, R, Sx),
                                      MatrixMap<T>(scratch.dropped, R, Sx), O);
            break;
        case SliceKernel::cached:
            ops::cached_attention_forward<T>(Q, K, V, mask, call.scale,
                                             MatrixMap<T>(scratch.p, R, Sx), O);
            break;
    }
}

/// The mask of slice (b, h) of a call with H heads: masks [L, S] shared, or [B, H, L, S] each.
template <class T>
ops::ScoreMask<T> slice_mask(const AttentionMasks<T>& masks, Index H, Index b, Index h,
                             const AttentionGeometry& g) {
    const Index slice = b * H + h, LS = g.L * g.S;
    ops::ScoreMask<T> mask;
    if (!masks.attn_mask.empty())
        mask.mask = masks.attn_mask.data() + (masks.attn_mask.rank() == 4 ? slice * LS : 0);
    mask.mask_ld = g.S;
    if (!masks.attn_bias.empty())
        mask.bias = masks.attn_bias.data() + (masks.attn_bias.rank() == 4 ? slice * LS : 0);
    mask.bias_ld = g.S;
    if (!masks.key_padding_mask.empty()) mask.key_padding = masks.key_padding_mask.data() + b * g.S;
    mask.causal = masks.is_causal;
    mask.causal_offset = ops::causal_offset(masks.causal_alignment, g.L, g.S);
    mask.masked_keys = g.S;
    return mask;
}

/// Step 3 of a forward call over every slice; query head h reads key/value head kv_head(h).
/// Returns the weights when masks.need_weights: the probabilities after dropout (as torch
/// returns them), per head [B, H, L, Sx] or averaged over the heads [B, L, Sx]. Averaged ones
/// are summed into one [L, Sx] matrix per batch as each head is done, so that no
/// [B, H, L, Sx] is held for them; a thread then takes the heads of one batch in turn (they
/// add into the same matrix). Otherwise slices are independent and run on any thread.
template <class T>
Tensor<T> attend(ForwardActivations<T>& acts, const AttentionMasks<T>& masks,
                 const InProjLayout& layout) {
    const AttentionCall<T>& call = acts.call;
    const AttentionGeometry& g = call.geometry;
    const Index B = g.B, L = g.L, Sx = g.Sx, H = layout.H;
    const bool average = masks.need_weights && masks.average_attn_weights;
    Tensor<T> weights;
    if (masks.need_weights)
        weights = average ? Tensor<T>(Shape{B, L, Sx})  // zero: the heads are added in
                          : Tensor<T>::uninitialized(Shape{B, H, L, Sx});  // written per slice
    const auto slice = [&](Index b, Index h, int thread) {
        const Index kv = layout.kv_head(h);
        const T gate = acts.gated() ? acts.gates[static_cast<std::size_t>(b * H + h)] : T(1);
        const auto stream = static_cast<std::uint64_t>(b * H + h);
        const ops::ScoreMask<T> mask = slice_mask(masks, H, b, h, g);
        SliceScratch<T> scratch;
        if (call.blocked()) {
            scratch.tiles = acts.tile_scratch(thread);
            scratch.lse = acts.lse(b, h).data();
        } else {
            scratch.p = acts.p(b, h, thread).data();
            scratch.dropped = acts.dropped(b, h, thread).data();
        }
        attend<T>(call, acts.q(b, h), acts.k(b, kv), acts.v(b, kv), mask, stream, scratch,
                  acts.ctx(b, h));
        if (!masks.need_weights) return;
        MatrixMap<T> W(weights.data() + (average ? b : b * H + h) * L * Sx, L, Sx);
        if (call.blocked()) {  // recomputed from the log-sum-exp
            if (!average) W.setZero();
            ops::blocked_attention_weights<T>(acts.q(b, h), acts.k(b, kv), mask, call.scale,
                                              call.dropout, stream, acts.lse(b, h), call.tiles,
                                              scratch.tiles, gate, W);
        } else if (average) {
            W += gate * MatrixMap<T>(scratch.dropped, L, Sx);
        } else {
            W = gate * MatrixMap<T>(scratch.dropped, L, Sx);
        }
    };
    if (average) {
        parallel_for(B, [&](Index b, int thread) {
            for (Index h = 0; h < H; ++h) slice(b, h, thread);
        });
        weights.matrix() /= static_cast<T>(H);  // the mean over heads, [B, L, Sx]
    } else {
        parallel_for(B * H, [&](Index s, int thread) { slice(s / H, s % H, thread); });
    }
    return weights;
}

// ---- 3b. gate the heads: ctx_bh xi_bh, xi the head mask (Michel et al. 2019) ------------------

/// Step 3b of a forward call: each head's [L, D] block of ctx times its gate, into out_ctx()
/// (a copy, kept beside ctx, in training; ctx itself in eval mode).
template <class T>
void gate_heads(ForwardActivations<T>& acts, const InProjLayout& layout) {
    const AttentionGeometry& g = acts.call.geometry;
    const Index H = layout.H, D = layout.D;
    MatrixMap<T> gated = acts.out_ctx();  // [B L, H D]
    if (gated.data() != acts.ctx().data()) gated = acts.ctx();
    for (Index b = 0; b < g.B; ++b)
        for (Index h = 0; h < H; ++h)
            gated.block(b * g.L, h * D, g.L, D) *= acts.gates[static_cast<std::size_t>(b * H + h)];
}

/// Backward of step 3b: with dG_bh the gradient of the gated block (from the out-projection's
/// backward), d loss / d xi_bh = sum(dG_bh ⊙ ctx_bh) is added where asked, and
/// dctx_bh = xi_bh dG_bh replaces dG_bh in place.
template <class T>
void gate_heads_backward(ForwardActivations<T>& acts, ActivationGradients<T>& grads,
                         const InProjLayout& layout) {
    const AttentionGeometry& g = acts.call.geometry;
    const Index H = layout.H;
    T* dxi = acts.gate_grad.data();  // [B, H] or [H], or null
    for (Index b = 0; b < g.B; ++b)
        for (Index h = 0; h < H; ++h) {
            auto dG = grads.ctx(b, h);  // [L, D]
            if (dxi)
                dxi[acts.gate_grad_batched ? b * H + h : h] +=
                    (dG.array() * acts.ctx(b, h).array()).sum();
            dG *= acts.gates[static_cast<std::size_t>(b * H + h)];
        }
}

/// Step 3b of decode: the new tokens' [T, D] blocks of ctx [B T, H D] times head_mask [H] or
/// [B, H].
template <class T>
void gate_decoded_heads(MatrixMap<T> ctx, TensorView<const T> head_mask, Index B, Index Tn,
                        const InProjLayout& layout) {
    const Index H = layout.H, D = layout.D;
    const bool batched = head_mask.rank() == 2;
    for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h)
            ctx.block(b * Tn, h * D, Tn, D) *= head_mask.data()[batched ? b * H + h : h];
}

/// Backward of step 3: dQ_bh, dK_bh, dV_bh from dO_bh. Blocked: the probabilities recomputed
/// tile by tile from LSE_bh, with forward's masks and O_bh = ctx_bh; materialised: from the
/// saved P_bh. The G query heads of a group add into their key/value head's dK, dV: one task
/// per (batch, key/value head) walks its group's heads in turn, so no two threads add into one.
template <class T>
void attend_backward(ForwardActivations<T>& acts, ActivationGradients<T>& grads,
                     const InProjLayout& layout) {
    const AttentionCall<T>& call = acts.call;
    const AttentionGeometry& g = call.geometry;
    const Index H = layout.H, Hkv = layout.kv_heads, G = layout.group();
    parallel_for(g.B * Hkv, [&](Index task, int thread) {
        const Index b = task / Hkv, kv = task % Hkv;
        for (Index h = kv * G; h < (kv + 1) * G; ++h) {
            const auto stream = static_cast<std::uint64_t>(b * H + h);  // forward's dropout stream
            if (call.blocked()) {
                ops::blocked_attention_backward<T>(
                    acts.q(b, h), acts.k(b, kv), acts.v(b, kv), acts.ctx(b, h), acts.lse(b, h),
                    slice_mask(acts.masks, H, b, h, g), call.scale, call.dropout, stream,
                    call.tiles, grads.ctx(b, h), grads.tile_scratch(thread), grads.q(b, h),
                    grads.k(b, kv), grads.v(b, kv));
            } else {
                ops::attention_backward<T>(acts.q(b, h), acts.k(b, kv), acts.v(b, kv),
                                           acts.p(b, h, thread), call.scale, call.dropout, stream,
                                           grads.ctx(b, h), grads.p(b, h, thread), grads.q(b, h),
                                           grads.k(b, kv), grads.v(b, kv));
            }
        }
    });
}

/// Query rows per block when decode attends a chunk of several new tokens (attend_cached).
inline constexpr Index kDecodeQueryRows = 128;

/// Query rows of one slice's probabilities in attend_cached for Tn new tokens: the G heads of a
/// group for one token, else a block of kDecodeQueryRows rows (all Tn with appended keys).
inline Index decode_slice_rows(Index Tn, Index G, bool appended) noexcept {
    if (Tn == 1) return G;
    return appended ? Tn : std::min(Tn, kDecodeQueryRows);
}

/// Steps 2 and 3 of decode, per (batch, key/value head): the cache's keys with the extra keys
/// appended (append_keys, into per-thread copies), then attention by the cached kernel.
/// One new token: the G query heads of a group are one [G, D] block (query_heads), so they
/// attend the group's keys together, in one product that reads the keys once. A chunk of T
/// tokens: each head's [T, D] queries with the bottom-right causal rule (new token t sees keys
/// j <= n + t, n the tokens held before the chunk).
template <class T>
void attend_cached(const AttentionCall<T>& call, const AttentionParameters<const T>& params,
                   const KVCache<T>& cache, DecodeBuffers<T>& buffers) {
    const AttentionGeometry& g = call.geometry;  // L = T new tokens, S = N held tokens
    const Index N = g.S, Sx = g.Sx, Tn = g.L, D = params.layout.D, HD = params.layout.inner();
    const Index Hkv = params.layout.kv_heads, G = params.layout.group();
    parallel_for(g.B * Hkv, [&](Index slice, int thread) {
        const Index b = slice / Hkv, kv = slice % Hkv;
        const T* k = cache.key_block(b, kv).data();    // the held [N, D] keys
        const T* v = cache.value_block(b, kv).data();  // and values
        if (cache.precision() == Precision::bf16) {    // widened into the [Sx, D] copies
            MatrixMap<T> Kx = buffers.k(thread, Sx), Vx = buffers.v(thread, Sx);
            cache.widen_blocks(b, kv, Kx.data(), Vx.data());
            if (call.appended_keys)  // the held rows stay where they are; the extra ones follow
                append_keys<T>(params, kv, Kx.topRows(N), Vx.topRows(N), Kx, Vx);
            k = Kx.data();
            v = Vx.data();
        } else if (call.appended_keys) {  // [N + extra, D] copies
            const MatrixMap<T> Kx = buffers.k(thread, Sx), Vx = buffers.v(thread, Sx);
            append_keys<T>(params, kv, cache.key_block(b, kv), cache.value_block(b, kv), Kx, Vx);
            k = Kx.data();
            v = Vx.data();
        }
        const MatrixMap<const T> K(k, Sx, D);  // [Sx, D]
        const MatrixMap<const T> V(v, Sx, D);  // [Sx, D]
        ops::ScoreMask<T> mask;
        mask.key_padding = cache.key_padding(b);
        mask.masked_keys = N;
        SliceScratch<T> scratch;
        scratch.p = buffers.p(thread, decode_slice_rows(Tn, G, call.appended_keys > 0), Sx).data();
        if (Tn == 1) {
            const Index col = kv * G * D;  // the group's query heads, [G, D]
            attend<T>(call, buffers.projection.query_heads(b, kv * G, G), K, V, mask, 0, scratch,
                      MatrixMap<T>(buffers.ctx().data() + b * HD + col, G, D));
            return;
        }
        mask.causal = true;
        if (call.appended_keys) {  // the extra keys follow all N: every row reads every key
            mask.causal_offset = ops::causal_offset(CausalAlignment::bottom_right, Tn, N);
            for (Index h = kv * G; h < (kv + 1) * G; ++h)
                attend<T>(call, buffers.projection.block(kQuery, b, h), K, V, mask, 0, scratch,
                          buffers.ctx().block(b * Tn, h * D, Tn, D));
            return;
        }
        // Blocks of kDecodeQueryRows new tokens, each over the keys its last row may see (new
        // token t sees the N - Tn held before the chunk and t + 1 of its own): a long chunk (a
        // prefill) computes half the scores of a square, in a probability block that stays in
        // cache. A row's scores, softmax and sum are those of the whole slice.
        for (Index r0 = 0; r0 < Tn; r0 += kDecodeQueryRows) {
            const Index rows = std::min(kDecodeQueryRows, Tn - r0);
            const Index keys = N - Tn + r0 + rows;  // the last row's causal end
            ops::ScoreMask<T> block_mask = mask;
            block_mask.masked_keys = keys;
            block_mask.causal_offset =
                ops::causal_offset(CausalAlignment::bottom_right, rows, keys);
            for (Index h = kv * G; h < (kv + 1) * G; ++h)
                attend<T>(call, buffers.projection.block(kQuery, b, h).middleRows(r0, rows),
                          K.topRows(keys), V.topRows(keys), block_mask, 0, scratch,
                          buffers.ctx().block(b * Tn + r0, h * D, rows, D));
        }
    });
}

// ---- 4. project out: output = ctx W_o^T + b_o, ctx [B L, H D], W_o [E, H D] ------------------

template <class T>
void project_out(const AttentionParameters<const T>& params, ConstMatrixRef<T> ctx,
                 MatrixRef<T> out) {
    const Index E = params.layout.E;
    params.out_holder->forward_block(ctx, 0, E, params.layout.inner(), params.b_out, out,
                                     /*current=*/false);
}

/// Backward of project_out: dctx = dout W_o, dW_o += dout^T ctx, db_o += sum dout (in bf16:
/// dout, W_o and ctx rounded for the products, float accumulation and gradients).
template <class T>
void project_out_backward(const AttentionParameters<const T>& params,
                          const AttentionParameters<T>& grads, ConstMatrixRef<T> ctx,
                          ConstMatrixRef<T> dout, MatrixRef<T> dctx) {
    if constexpr (std::is_same_v<T, float>) {
        if (params.w_out_bf16) {  // mixed precision: bf16(dout), bf16(W_o), bf16(ctx)
            const Index E = params.layout.E;
            ops::Bf16BackwardWorkspace workspace;  // the call's own
            const ops::ConstBf16Matrix dout16 = ops::rounded_to_bf16(dout, workspace.dy);
            ops::linear_backward_input_bf16(
                dout16, ops::ConstBf16Matrix(params.w_out_bf16, E, params.layout.inner()), dctx,
                workspace.gemm);
            ops::linear_backward_weight_bf16(dout16, ops::rounded_to_bf16(ctx, workspace.x),
                                             grads.out_weight(), workspace.gemm);
            if (grads.b_out) ops::linear_backward_bias<T>(dout, grads.b_out);
            return;
        }
    }
    ops::linear_backward<T>(ctx, params.out_weight(), dout, dctx, grads.out_weight(), grads.b_out);
}

}  // namespace headwise::detail
