// SPDX-License-Identifier: MIT
// The buffers of attention calls: a forward's activations, a backward's gradients of them, and
// decode's scratch, each with per-(batch, head) accessors.
#pragma once

#include <algorithm>  // std::copy, std::max
#include <cstddef>    // std::size_t
#include <memory>     // std::shared_ptr, std::unique_ptr, std::weak_ptr
#include <mutex>      // std::mutex, std::lock_guard
#include <vector>     // std::vector

#include "../../../config.hpp"
#include "../../../ops/blocked_attention.hpp"
#include "../../../shape.hpp"
#include "../../../tensor.hpp"
#include "../../detail/scratch_buffer.hpp"
#include "../options.hpp"
#include "attention_call.hpp"
#include "projection_plan.hpp"

namespace headwise::detail {

/// [rows, D] block of (b, h) in `data` under layout `l`.
template <class T>
StridedMatrixMap<T> head_block(T* data, const HeadLayout& l, Index b, Index h, Index D) {
    return StridedMatrixMap<T>(data + l.offset + b * l.batch_stride + h * l.head_stride, l.rows, D,
                               Eigen::OuterStride<>(l.row_stride));
}

/// The output buffers of a projection plan's GEMMs, and the head blocks they hold.
template <class T>
class ProjectionBuffers {
public:
    const ProjectionPlan& plan() const noexcept { return plan_; }
    /// Makes plan() the plan for `key`, rebuilt only when the key changed.
    void plan_for(const ProjectionKey& key) {
        if (plan_.gemms.empty() || !(plan_.key == key)) build_projection_plan(key, plan_);
    }
    /// Takes another call's plan (a backward takes its forward's).
    void follow(const ProjectionPlan& plan) { plan_ = plan; }
    /// Sizes the buffers for plan(): zero when `zero` (gradients add into them), else unspecified.
    void size(bool zero) {
        for (std::size_t i = 0; i < plan_.buffers.size(); ++i) {
            const Shape shape{plan_.buffers[i][0], plan_.buffers[i][1]};
            if (zero)
                y_[i].zeros(shape);
            else
                y_[i].get(shape);
        }
        for (int i = 0; i < 3; ++i) data_[i] = y_[plan_.heads[i].buffer].data();
    }
    /// The [B N, w_rows] output block of GEMM `gm`.
    StridedMatrixMap<T> y(const ProjectionGemm& gm) {
        const AttentionGeometry& g = plan_.key.g;
        const Index rows = g.B * (gm.input == kQuery ? g.L : g.S);
        return StridedMatrixMap<T>(y_[gm.buffer].data() + gm.y_offset, rows, gm.w_rows,
                                   Eigen::OuterStride<>(gm.y_stride));
    }
    /// Input i's [rows, D] block of (batch b, head h); h counts key/value heads for K and V.
    StridedMatrixMap<T> block(int input, Index b, Index h) {
        return head_block(data_[input], plan_.heads[input], b, h, plan_.key.layout.D);
    }
    /// The G query heads [h0, h0 + G) of batch b as one [G, D] matrix, for a call of one query
    /// (L = 1): every layout puts head h's row h * head_stride after head 0's.
    StridedMatrixMap<T> query_heads(Index b, Index h0, Index G) {
        const HeadLayout& l = plan_.heads[kQuery];
        HEADWISE_ASSERT(l.rows == 1);
        return StridedMatrixMap<T>(
            data_[kQuery] + l.offset + b * l.batch_stride + h0 * l.head_stride, G,
            plan_.key.layout.D, Eigen::OuterStride<>(l.head_stride));
    }

private:
    ProjectionPlan plan_;
    ScratchBuffer<T> y_[3];
    T* data_[3] = {};
};

/// Every buffer of one forward call, or of its backward, sized once per call and reused:
///   Y                      the projection buffers the plan's GEMMs write
///   K', V' [B, Hkv, Sx, D] keys and values with bias_k / the zero key appended (when any)
///   P [B, H, L, Sx]        softmax probabilities (one [L, Sx] slice per thread when not kept;
///                          none for the blocked kernel)
///   A [threads, L, Sx]     probabilities after dropout (only when dropout is active)
///   LSE [B, H, L]          each query row's log-sum-exp (blocked kernel)
///   tiles [threads, n]     the blocked kernel's per-thread scratch
///   ctx [B L, H D]         Concat(head_1, ..., head_H) (H D = E unless options.head_dim)
/// The accessors hide the head layout each projection leaves behind. ForwardActivations holds
/// the values, ActivationGradients their gradients (dY, dK', dV', dctx, and a per-thread
/// [L, Sx] scratch in P's place), so that backward reads grads.q(b, h) for dQ_bh where forward
/// reads acts.q(b, h) for Q_bh.
template <class T>
class AttentionBuffers {
public:
    ProjectionBuffers<T> projection;

    /// Attention's operands for (batch b, head h): Q_bh [L, D], K_bh and V_bh [Sx, D] (the
    /// appended copies when keys were appended, else the projection's blocks). For k() and v()
    /// and their projected blocks, h counts key/value heads (layout.kv_head(query head)).
    StridedMatrixMap<T> q(Index b, Index h) { return projection.block(kQuery, b, h); }
    StridedMatrixMap<T> k(Index b, Index h) { return extended(kKey, b, h); }
    StridedMatrixMap<T> v(Index b, Index h) { return extended(kValue, b, h); }
    /// The projection's own [S, D] blocks of K and V (before anything is appended).
    StridedMatrixMap<T> k_projected(Index b, Index h) { return projection.block(kKey, b, h); }
    StridedMatrixMap<T> v_projected(Index b, Index h) { return projection.block(kValue, b, h); }
    /// True when bias_k / zero-attention keys were appended: k() and v() are then K', V'.
    bool appended() const noexcept { return g_.Sx != g_.S; }
    /// The geometry the buffers were last sized for.
    const AttentionGeometry& geometry() const noexcept { return g_; }

    /// P_bh [L, Sx]: slice (b, h) of P when kept whole, else thread `thread`'s slice.
    MatrixMap<T> p(Index b, Index h, int thread) {
        const Index slice = keep_p_ ? b * heads_ + h : thread;
        return MatrixMap<T>(p_.data() + slice * g_.L * g_.Sx, g_.L, g_.Sx);
    }
    /// The probabilities after dropout for (b, h) [L, Sx]: thread `thread`'s scratch when
    /// dropout is active, else P_bh itself.
    MatrixMap<T> dropped(Index b, Index h, int thread) {
        if (!dropout_) return p(b, h, thread);
        return MatrixMap<T>(a_.data() + thread * g_.L * g_.Sx, g_.L, g_.Sx);
    }
    /// LSE_bh [L]: the log-sum-exp of each query row of slice (b, h) (blocked kernel).
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> lse(Index b, Index h) {
        return Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(
            lse_.data() + (b * heads_ + h) * g_.L, g_.L);
    }
    /// Thread `thread`'s scratch for the blocked kernels.
    T* tile_scratch(int thread) { return tiles_.data() + thread * tile_scratch_; }

    /// ctx [B L, H D] and head h's [L, D] block of batch b.
    MatrixMap<T> ctx() { return MatrixMap<T>(ctx_.data(), g_.B * g_.L, inner_); }
    auto ctx(Index b, Index h) { return ctx().block(b * g_.L, h * D_, g_.L, D_); }

protected:
    /// Sizes every buffer for `call` and the plan in `projection`. `keep_p`: P whole, else one
    /// slice per thread (materialised kernel). `gradients`: the buffers backward adds into are
    /// zero, and the blocked kernel's scratch is its backward's; else contents are unspecified
    /// (each step writes its buffers in full).
    void size(const AttentionCall<T>& call, bool keep_p, int threads, bool gradients) {
        const InProjLayout& layout = projection.plan().key.layout;
        g_ = call.geometry;
        heads_ = layout.H;
        D_ = layout.D;
        inner_ = layout.inner();
        keep_p_ = keep_p;
        dropout_ = !gradients && call.dropout.active();
        projection.size(gradients);
        if (appended()) {  // K', V' [B, Hkv, Sx, D]
            const Shape shape{g_.B, layout.kv_heads, g_.Sx, D_};
            const HeadLayout l{0, 0, layout.kv_heads * g_.Sx * D_, g_.Sx * D_, D_, g_.Sx};
            extended_data_[0] = (gradients ? kx_.zeros(shape) : kx_.get(shape)).data();
            extended_data_[1] = (gradients ? vx_.zeros(shape) : vx_.get(shape)).data();
            extended_layout_ = l;
        }
        if (call.blocked()) {
            // Backward needs two tiles, Delta [L] and its packed operands; forward a tile, the
            // running max and sum, and K^T and V packed (ops/blocked_attention.hpp).
            tile_scratch_ =
                gradients ? ops::blocked_attention_backward_scratch(call.tiles, g_.L, g_.Sx, D_, D_)
                          : ops::blocked_attention_forward_scratch(call.tiles, g_.Sx, D_, D_);
            tiles_.get(Shape{threads, tile_scratch_});
            if (!gradients) lse_.get(Shape{g_.B, heads_, g_.L});
        } else {
            p_.get(keep_p ? Shape{g_.B, heads_, g_.L, g_.Sx} : Shape{threads, g_.L, g_.Sx});
            if (dropout_) a_.get(Shape{threads, g_.L, g_.Sx});
        }
        const Shape ctx{g_.B * g_.L, inner_};
        if (gradients)
            ctx_.zeros(ctx);
        else
            ctx_.get(ctx);
    }

private:
    StridedMatrixMap<T> extended(int input, Index b, Index h) {
        if (!appended()) return projection.block(input, b, h);
        return head_block(extended_data_[input - kKey], extended_layout_, b, h, D_);
    }

    ScratchBuffer<T> kx_, vx_, p_, a_, ctx_, lse_, tiles_;
    Index tile_scratch_ = 0;  // elements of tiles_ per thread
    HeadLayout extended_layout_ = {};
    T* extended_data_[2] = {};  // K', V'
    AttentionGeometry g_;
    Index heads_ = 0, D_ = 0, inner_ = 0;
    bool keep_p_ = false, dropout_ = false;
};

/// What a forward computed and what its backward needs: the call's record and arguments, and
/// the activations Y, K', V', P (or LSE), ctx.
template <class T>
class ForwardActivations : public AttentionBuffers<T> {
public:
    AttentionCall<T> call;              // built by describe_call
    MultiheadAttentionOptions options;  // the module's, at forward: backward compares its own
    bool batched = true;
    Shape shape_of[3];                     // of the query, key and value arguments
    int x_of[3] = {kQuery, kKey, kValue};  // which argument holds input i's data
    AttentionMasks<T> masks;               // kept when a blocked backward applies them again
    // Step 3b's gates: the head mask broadcast to [B, H] (empty: no gates); where backward adds
    // d loss / d gates (null: nowhere), [B, H] or summed over the batch into [H].
    std::vector<T> gates;
    TensorView<T> gate_grad;
    bool gate_grad_batched = false;

    bool gated() const noexcept { return !gates.empty(); }
    /// Sizes the gated copy of ctx that a gated training forward keeps beside ctx (backward
    /// needs both); without it, gate_heads gates ctx in place.
    void size_gated() {
        keep_ungated_ = true;
        gated_.get(Shape{this->geometry().B * this->geometry().L, this->ctx().cols()});
    }
    /// What the out-projection reads, [B L, H D]: the gated copy when one is kept, else ctx.
    MatrixMap<T> out_ctx() {
        if (!keep_ungated_) return this->ctx();
        return MatrixMap<T>(gated_.data(), this->ctx().rows(), this->ctx().cols());
    }

    /// Sizes the buffers for `call` and the plan; `keep_p`: P whole (a materialised training
    /// forward keeps it for backward), else one slice per thread. With a rotary embedding, the
    /// tables of positions [0, max(L, S)) too.
    void size_forward(bool keep_p, int threads) {
        this->size(call, keep_p, threads, false);
        keep_ungated_ = false;
        if (call.rotary.enabled) {
            const Index D = this->projection.plan().key.layout.D;
            rope_rows_ = std::max(call.geometry.L, call.geometry.S);
            rope_half_ = D / 2;
            rope_.get(Shape{2, rope_rows_, rope_half_});
        }
    }
    /// The rotary tables of positions 0, 1, ..., max(L, S) - 1: Cos and Sin [max(L, S), D/2]
    /// (step 1b fills them; its backward reads them).
    MatrixMap<T> rope_cos() { return MatrixMap<T>(rope_.data(), rope_rows_, rope_half_); }
    MatrixMap<T> rope_sin() {
        return MatrixMap<T>(rope_.data() + rope_rows_ * rope_half_, rope_rows_, rope_half_);
    }

    /// Sets the inputs X_i [B N_i, in_i]; copies them when `keep` (backward needs them after the
    /// caller's tensors may be gone), else views the caller's memory.
    void set_inputs(const TensorView<const T> (&args)[3], bool keep) {
        for (int i = 0; i < 3; ++i) {
            if (x_of[i] != i) {
                x_[i] = x_[x_of[i]];
            } else if (keep) {
                const TensorView<T> copy = x_buffer_[i].get(args[i].shape());
                std::copy(args[i].begin(), args[i].end(), copy.begin());
                x_[i] = copy;
            } else {
                x_[i] = args[i];
            }
        }
    }
    /// X_i [B N_i, in_i].
    TensorView<const T> x(int input) const noexcept { return x_[input]; }
    const TensorView<const T> (&inputs() const noexcept)[3] { return x_; }

private:
    ScratchBuffer<T> x_buffer_[3];
    TensorView<const T> x_[3];
    ScratchBuffer<T> gated_;  // [B L, H D]: ctx with the gates applied (gated training forwards)
    bool keep_ungated_ = false;
    ScratchBuffer<T> rope_;  // [2, rows, D/2]: Cos, then Sin
    Index rope_rows_ = 0, rope_half_ = 0;
};

/// The gradients of a forward's activations: dY, dK', dV', dctx, at the same places.
template <class T>
class ActivationGradients : public AttentionBuffers<T> {
public:
    /// Sizes the buffers as gradients of `acts`: dY, dK', dV' and dctx zero (the kernels add into
    /// them), the per-thread [L, Sx] scratch unspecified.
    void size_for(const ForwardActivations<T>& acts, int threads) {
        this->projection.follow(acts.projection.plan());
        this->size(acts.call, false, threads, true);
    }
};

/// Decode's scratch, owned by a KVCache: sized by the first call, grown only for a larger chunk.
///   Y                                   the new tokens' projections (the plan's buffers)
///   ctx [B T, H D]                      Concat(head_1, ..., head_H)
///   P [threads, R, capacity + 2]        probabilities, R query rows per slice
///   K', V' [threads, capacity + 2, D]   the cached keys with bias_k / the zero key appended
///   Cos, Sin [B T, D/2], positions [B T] the rotary tables of the new tokens (RoPE only)
template <class T>
class DecodeBuffers {
public:
    ProjectionBuffers<T> projection;

    /// Sizes for a call of `rows` new token rows ([B T, H D] ctx, `inner` = H D), `slice_rows`
    /// query rows per slice, at most `max_keys` keys, appended copies when `appended`.
    void size(Index rows, Index inner, Index slice_rows, Index max_keys, Index D, bool appended,
              int threads) {
        projection.size(false);
        ctx_.get(Shape{rows, inner});
        inner_ = inner;
        rows_ = rows;
        max_keys_ = max_keys;
        D_ = D;
        slice_rows_ = slice_rows;
        p_.get(Shape{threads, slice_rows, max_keys});
        if (appended) {
            kx_.get(Shape{threads, max_keys, D});
            vx_.get(Shape{threads, max_keys, D});
        }
    }
    /// Sizes the rotary tables and positions for `rows` new token rows of D features.
    void size_rotary(Index rows, Index D) {
        rope_.get(Shape{2, rows, D / 2});
        if (static_cast<Index>(positions_.size()) < rows)
            positions_.resize(static_cast<std::size_t>(rows));
    }
    /// The new tokens' positions [B T] and their rotary tables Cos, Sin [B T, D/2].
    Index* positions() noexcept { return positions_.data(); }
    MatrixMap<T> rope_cos() { return MatrixMap<T>(rope_.data(), rows_, D_ / 2); }
    MatrixMap<T> rope_sin() { return MatrixMap<T>(rope_.data() + rows_ * (D_ / 2), rows_, D_ / 2); }
    MatrixMap<T> ctx() { return MatrixMap<T>(ctx_.data(), rows_, inner_); }
    /// Thread `thread`'s [rows, keys] probabilities.
    MatrixMap<T> p(int thread, Index rows, Index keys) {
        return MatrixMap<T>(p_.data() + thread * slice_rows_ * max_keys_, rows, keys);
    }
    /// Thread `thread`'s [keys, D] copies of a slice's keys and values with the appended ones.
    MatrixMap<T> k(int thread, Index keys) {
        return MatrixMap<T>(kx_.data() + thread * max_keys_ * D_, keys, D_);
    }
    MatrixMap<T> v(int thread, Index keys) {
        return MatrixMap<T>(vx_.data() + thread * max_keys_ * D_, keys, D_);
    }

private:
    ScratchBuffer<T> ctx_, p_, kx_, vx_, rope_;
    std::vector<Index> positions_;  // only grows
    Index inner_ = 0, rows_ = 0, max_keys_ = 0, D_ = 0, slice_rows_ = 0;
};

/// Training buffers handed back when the call that used them is done, so that the next training
/// call reuses them instead of allocating (and faulting in) P and the rest again. Keeps at most
/// one spare set. A copy starts with its own, empty, pool.
template <class T>
class ActivationPool;

/// Where a finished call's activations go back to.
template <class T>
struct SpareActivations {
    std::mutex mutex;
    std::unique_ptr<ForwardActivations<T>> activations;
};

/// What forward keeps for backward (training mode only): the call's activations, handed back to
/// the module's pool when the last AttentionForward holding them is gone (or freed, if the
/// module is gone).
template <class T>
struct AttentionSaved {
    std::unique_ptr<ForwardActivations<T>> activations;
    std::weak_ptr<SpareActivations<T>> home;

    AttentionSaved(std::unique_ptr<ForwardActivations<T>> a, std::weak_ptr<SpareActivations<T>> h)
        : activations(std::move(a)), home(std::move(h)) {}
    AttentionSaved(const AttentionSaved&) = delete;
    AttentionSaved& operator=(const AttentionSaved&) = delete;
    /// The call these activations belong to (its geometry, scale, kernel and dropout).
    const AttentionCall<T>& call() const noexcept { return activations->call; }
    ~AttentionSaved() {
        if (const auto spare = home.lock()) {
            std::lock_guard<std::mutex> lock(spare->mutex);
            if (!spare->activations) spare->activations = std::move(activations);
        }
    }
};

template <class T>
class ActivationPool {
public:
    ActivationPool() = default;
    ActivationPool(const ActivationPool&) {}
    ActivationPool& operator=(const ActivationPool&) { return *this; }
    ActivationPool(ActivationPool&&) noexcept = default;
    ActivationPool& operator=(ActivationPool&&) noexcept = default;
    ~ActivationPool() = default;

    /// A saved state holding the spare activations if there are any, else new ones.
    std::shared_ptr<AttentionSaved<T>> make_saved() {
        if (!spare_) spare_ = std::make_shared<SpareActivations<T>>();
        std::unique_ptr<ForwardActivations<T>> a;
        {
            std::lock_guard<std::mutex> lock(spare_->mutex);
            a = std::move(spare_->activations);
        }
        if (!a) a = std::make_unique<ForwardActivations<T>>();
        return std::make_shared<AttentionSaved<T>>(std::move(a), spare_);
    }

private:
    std::shared_ptr<SpareActivations<T>> spare_;
};

}  // namespace headwise::detail
