// SPDX-License-Identifier: MIT
// AttentionActivations: every buffer one attention call uses, with per-(batch, head) accessors.
#pragma once

#include <algorithm>  // std::copy
#include <cstddef>    // std::size_t
#include <memory>     // std::shared_ptr, std::unique_ptr, std::weak_ptr
#include <mutex>      // std::mutex, std::lock_guard

#include "../../config.hpp"
#include "../../detail/scratch_buffer.hpp"
#include "../../ops/blocked_attention.hpp"
#include "../../ops/dropout.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "options.hpp"
#include "projection_plan.hpp"

namespace headwise::detail {

/// What one forward call is, besides its buffers: what backward needs to walk it back.
template <class T>
struct AttentionCall {
    ProjectionPlan plan;                // plan.key: projection, layout, geometry, self, kv_same
    MultiheadAttentionOptions options;  // the module's, at forward: backward compares its own
    bool batched = true;
    bool bias = true;                         // in_proj_bias and out_proj.bias
    bool bias_kv = false, zero_attn = false;  // keys appended after the projected ones
    T scale = T(0);                           // options.scale, or 1 / sqrt(D)
    ops::Dropout dropout;                     // inactive in eval mode
    bool blocked = false;       // ops/blocked_attention.hpp ran (else ops/attention.hpp)
    ops::AttentionTiles tiles;  // the blocked kernel's tiles
    AttentionMasks<T> masks;    // the call's masks: a blocked backward applies them again
    Shape shape_of[3];          // of the query, key and value arguments
    int x_of[3] = {kQuery, kKey, kValue};  // which argument holds input i's data

    const AttentionGeometry& g() const noexcept { return plan.key.g; }
    const InProjLayout& layout() const noexcept { return plan.key.layout; }
};

/// [rows, D] block of (b, h) in `data` under layout `l`.
template <class T>
StridedMatrixMap<T> head_block(T* data, const HeadLayout& l, Index b, Index h, Index D) {
    return StridedMatrixMap<T>(data + l.offset + b * l.batch_stride + h * l.head_stride, l.rows, D,
                               Eigen::OuterStride<>(l.row_stride));
}

/// Every buffer of one attention call, sized once per call and reused from call to call:
///   X_i [B N_i, in_i]      the inputs (copied only when backward needs them)
///   Y                      the projection buffers the plan's GEMMs write
///   K', V' [B, Hkv, Sx, D] keys and values with bias_k / the zero key appended (when any)
///   P [B, H, L, Sx]        softmax probabilities (one [L, Sx] slice per thread when not kept;
///                          none for the blocked kernel)
///   A [threads, L, Sx]     probabilities after dropout (only when dropout is active)
///   LSE [B, H, L]          each query row's log-sum-exp (blocked kernel)
///   tiles [threads, n]     the blocked kernel's per-thread scratch
///   ctx [B L, E]           Concat(head_1, ..., head_H)
/// The accessors hide the head layout each projection leaves behind. The same type holds the
/// gradients in backward (dY, dK', dV', dctx and a per-thread [L, Sx] scratch in P's place), so
/// that backward reads g.q(b, h) for dQ_bh where forward reads a.q(b, h) for Q_bh.
template <class T>
class AttentionActivations {
public:
    AttentionCall<T> call;

    /// Makes call.plan the plan for `key`, rebuilding it only when the key changed.
    void plan_for(const ProjectionKey& key) {
        if (call.plan.gemms.empty() || !(call.plan.key == key))
            call.plan = make_projection_plan(key);
    }

    /// Sizes the forward buffers for call.plan and call.blocked. `keep_p`: P whole, else one
    /// slice per thread (materialised kernel). Contents are unspecified: each step writes its
    /// buffers in full.
    void size_forward(bool keep_p, bool dropout, int threads) {
        size(keep_p, dropout, threads, false);
    }

    /// Sizes the buffers as gradients of `fwd`'s call: dY, dK', dV' and dctx zero (the kernels
    /// add into them), the per-thread [L, Sx] scratch unspecified.
    void size_backward(const AttentionCall<T>& fwd, int threads) {
        call.plan.key = fwd.plan.key;
        call.plan.buffers = fwd.plan.buffers;
        call.blocked = fwd.blocked;
        call.tiles = fwd.tiles;
        for (int i = 0; i < 3; ++i) call.plan.heads[i] = fwd.plan.heads[i];
        size(false, false, threads, true);
    }

    /// Sets the inputs X_i [B N_i, in_i]; copies them when `keep` (backward needs them after the
    /// caller's tensors may be gone), else views the caller's memory.
    void set_inputs(const TensorView<const T> (&args)[3], bool keep) {
        for (int i = 0; i < 3; ++i) {
            if (call.x_of[i] != i) {
                x_[i] = x_[call.x_of[i]];
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

    /// The [B N, w_rows] output block of GEMM `gm` in its projection buffer.
    StridedMatrixMap<T> y(const ProjectionGemm& gm) {
        const Index rows = call.g().B * (gm.input == kQuery ? call.g().L : call.g().S);
        return StridedMatrixMap<T>(y_[gm.buffer].data() + gm.y_offset, rows, gm.w_rows,
                                   Eigen::OuterStride<>(gm.y_stride));
    }

    /// Attention's operands for (batch b, head h): Q_bh [L, D], K_bh and V_bh [Sx, D] (the
    /// appended copies when keys were appended, else the projection's blocks). For k() and v()
    /// and their projected blocks, h counts key/value heads (layout.kv_head(query head)).
    StridedMatrixMap<T> q(Index b, Index h) { return block(kQuery, b, h); }
    StridedMatrixMap<T> k(Index b, Index h) { return block(kKey, b, h); }
    StridedMatrixMap<T> v(Index b, Index h) { return block(kValue, b, h); }
    /// The projection's own [S, D] blocks of K and V (before anything is appended).
    StridedMatrixMap<T> k_projected(Index b, Index h) { return projected(kKey, b, h); }
    StridedMatrixMap<T> v_projected(Index b, Index h) { return projected(kValue, b, h); }
    /// True when bias_k / zero-attention keys were appended: k() and v() are then K', V'.
    bool appended() const noexcept { return call.g().Sx != call.g().S; }

    /// P_bh [L, Sx]: slice (b, h) of P when kept whole, else thread `thread`'s slice.
    MatrixMap<T> p(Index b, Index h, int thread) {
        const AttentionGeometry& g = call.g();
        const Index slice = keep_p_ ? b * heads_ + h : thread;
        return MatrixMap<T>(p_.data() + slice * g.L * g.Sx, g.L, g.Sx);
    }
    /// The probabilities after dropout for (b, h) [L, Sx]: thread `thread`'s scratch when
    /// dropout is active, else P_bh itself.
    MatrixMap<T> dropped(Index b, Index h, int thread) {
        if (!dropout_) return p(b, h, thread);
        const AttentionGeometry& g = call.g();
        return MatrixMap<T>(a_.data() + thread * g.L * g.Sx, g.L, g.Sx);
    }
    /// P [B, H, L, Sx], when kept whole.
    TensorView<T> p_all() {
        const AttentionGeometry& g = call.g();
        return TensorView<T>(p_.data(), Shape{g.B, heads_, g.L, g.Sx});
    }

    /// LSE_bh [L]: the log-sum-exp of each query row of slice (b, h) (blocked kernel).
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> lse(Index b, Index h) {
        const Index L = call.g().L;
        return Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(lse_.data() + (b * heads_ + h) * L,
                                                               L);
    }
    /// Thread `thread`'s scratch for the blocked kernels.
    T* tile_scratch(int thread) { return tiles_.data() + thread * tile_scratch_; }

    /// ctx [B L, E] and head h's [L, D] block of batch b.
    MatrixMap<T> ctx() { return MatrixMap<T>(ctx_.data(), call.g().B * call.g().L, E_); }
    auto ctx(Index b, Index h) { return ctx().block(b * call.g().L, h * D_, call.g().L, D_); }

private:
    void size(bool keep_p, bool dropout, int threads, bool zero) {
        const AttentionGeometry& g = call.g();
        const ProjectionPlan& plan = call.plan;
        heads_ = plan.key.layout.H;
        kv_heads_ = plan.key.layout.kv_heads;
        D_ = plan.key.layout.D;
        E_ = plan.key.layout.E;
        keep_p_ = keep_p;
        dropout_ = dropout;
        for (int i = 0; i < 3; ++i) {
            proj_[i] = plan.heads[i];
            att_[i] = plan.heads[i];
        }
        for (std::size_t i = 0; i < plan.buffers.size(); ++i) {
            const Shape shape{plan.buffers[i][0], plan.buffers[i][1]};
            if (zero)
                y_[i].zeros(shape);
            else
                y_[i].get(shape);
        }
        for (int i = 0; i < 3; ++i) {
            proj_data_[i] = y_[proj_[i].buffer].data();
            att_data_[i] = proj_data_[i];
        }
        if (appended()) {  // K', V' [B, Hkv, Sx, D]
            const Shape shape{g.B, kv_heads_, g.Sx, D_};
            const HeadLayout l{0, 0, kv_heads_ * g.Sx * D_, g.Sx * D_, D_, g.Sx};
            att_data_[kKey] = (zero ? kx_.zeros(shape) : kx_.get(shape)).data();
            att_data_[kValue] = (zero ? vx_.zeros(shape) : vx_.get(shape)).data();
            att_[kKey] = l;
            att_[kValue] = l;
        }
        if (call.blocked) {
            // Backward needs two tiles and Delta [L]; forward a tile and the running max and sum.
            tile_scratch_ = zero ? ops::blocked_attention_backward_scratch(call.tiles, g.L)
                                 : ops::blocked_attention_forward_scratch(call.tiles);
            tiles_.get(Shape{threads, tile_scratch_});
            if (!zero) lse_.get(Shape{g.B, heads_, g.L});
        } else {
            p_.get(keep_p ? Shape{g.B, heads_, g.L, g.Sx} : Shape{threads, g.L, g.Sx});
            if (dropout) a_.get(Shape{threads, g.L, g.Sx});
        }
        const Shape ctx{g.B * g.L, E_};
        if (zero)
            ctx_.zeros(ctx);
        else
            ctx_.get(ctx);
    }
    StridedMatrixMap<T> block(int input, Index b, Index h) {
        return head_block(att_data_[input], att_[input], b, h, D_);
    }
    StridedMatrixMap<T> projected(int input, Index b, Index h) {
        return head_block(proj_data_[input], proj_[input], b, h, D_);
    }

    ScratchBuffer<T> x_buffer_[3], y_[3], kx_, vx_, p_, a_, ctx_, lse_, tiles_;
    Index tile_scratch_ = 0;  // elements of tiles_ per thread
    TensorView<const T> x_[3];
    HeadLayout proj_[3] = {}, att_[3] = {};  // layouts of the projection blocks, of the operands
    T* proj_data_[3] = {};
    T* att_data_[3] = {};
    Index heads_ = 0, kv_heads_ = 0, D_ = 0, E_ = 0;
    bool keep_p_ = false, dropout_ = false;
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
    std::unique_ptr<AttentionActivations<T>> activations;
};

/// What forward keeps for backward (training mode only): the call's activations, handed back to
/// the module's pool when the last AttentionForward holding them is gone (or freed, if the
/// module is gone).
template <class T>
struct AttentionSaved {
    std::unique_ptr<AttentionActivations<T>> activations;
    std::weak_ptr<SpareActivations<T>> home;

    AttentionSaved(std::unique_ptr<AttentionActivations<T>> a, std::weak_ptr<SpareActivations<T>> h)
        : activations(std::move(a)), home(std::move(h)) {}
    AttentionSaved(const AttentionSaved&) = delete;
    AttentionSaved& operator=(const AttentionSaved&) = delete;
    /// The call these activations belong to (its options, plan and dropout stream).
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
        std::unique_ptr<AttentionActivations<T>> a;
        {
            std::lock_guard<std::mutex> lock(spare_->mutex);
            a = std::move(spare_->activations);
        }
        if (!a) a = std::make_unique<AttentionActivations<T>>();
        return std::make_shared<AttentionSaved<T>>(std::move(a), spare_);
    }

private:
    std::shared_ptr<SpareActivations<T>> spare_;
};

}  // namespace headwise::detail
