// SPDX-License-Identifier: MIT
// MultiheadAttention<T>: torch.nn.MultiheadAttention's parameters, forward and backward, with the
// Q/K/V projections computed fused, separately or per head.
#pragma once

#include <Eigen/Core>

#include <cmath>      // std::sqrt, std::isfinite
#include <cstdint>    // std::uint64_t
#include <map>        // std::map
#include <memory>     // std::shared_ptr
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../detail/parallel.hpp"
#include "../detail/projection_plan.hpp"
#include "../detail/state_dict.hpp"
#include "../detail/workspace.hpp"
#include "../error.hpp"
#include "../init.hpp"
#include "../ops/attention.hpp"
#include "../ops/dropout.hpp"
#include "../ops/linear.hpp"
#include "../random.hpp"
#include "../tensor.hpp"
#include "attention_options.hpp"
#include "module.hpp"

namespace headwise {

namespace detail {
template <class T>
struct AttentionSaved;
}  // namespace detail

/// What forward returns. Keep it until backward: it holds what backward needs (in training mode;
/// in eval mode it holds nothing but the results).
template <class T>
struct AttentionForward {
    Tensor<T> output;        // [B, L, E] ([L, E] for an unbatched call)
    Tensor<T> attn_weights;  // [B, L, S'] or [B, H, L, S'] when need_weights, else empty
    std::shared_ptr<const detail::AttentionSaved<T>> saved;  // null in eval mode

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// Gradients of the loss with respect to each argument of forward, each of its argument's shape.
/// A tensor passed as query, key and value has gradient query + key + value.
template <class T>
struct AttentionGradients {
    Tensor<T> query;
    Tensor<T> key;
    Tensor<T> value;
};

/// Head i's slices of the in-projection, as views into the packed parameters (no copy):
/// W_i^Q [D, E], W_i^K [D, kdim], W_i^V [D, vdim] in PyTorch's (out, in) layout, so that
/// Q_i = X W_i^Q^T + b_i^Q. The paper's W_i^Q (E x D) is the transpose of q_weight().
template <class T>
class HeadParameters {
public:
    TensorView<const T> q_weight() const { return weight(w_, detail::kQuery); }
    TensorView<const T> k_weight() const { return weight(w_, detail::kKey); }
    TensorView<const T> v_weight() const { return weight(w_, detail::kValue); }
    TensorView<const T> q_bias() const { return bias(b_, detail::kQuery); }
    TensorView<const T> k_bias() const { return bias(b_, detail::kKey); }
    TensorView<const T> v_bias() const { return bias(b_, detail::kValue); }
    TensorView<const T> q_weight_grad() const { return weight(gw_, detail::kQuery); }
    TensorView<const T> k_weight_grad() const { return weight(gw_, detail::kKey); }
    TensorView<const T> v_weight_grad() const { return weight(gw_, detail::kValue); }
    TensorView<const T> q_bias_grad() const { return bias(gb_, detail::kQuery); }
    TensorView<const T> k_bias_grad() const { return bias(gb_, detail::kKey); }
    TensorView<const T> v_bias_grad() const { return bias(gb_, detail::kValue); }

private:
    template <class>
    friend class MultiheadAttention;
    HeadParameters(const T* w, const T* b, const T* gw, const T* gb, Index i, Index E, Index D,
                   Index kdim, Index vdim)
        : w_(w), b_(b), gw_(gw), gb_(gb), i_(i), E_(E), D_(D), in_{E, kdim, vdim} {}

    TensorView<const T> weight(const T* base, int input) const {
        Index offset = 0;
        for (int j = 0; j < input; ++j) offset += E_ * in_[j];
        return view(base + offset + i_ * D_ * in_[input], Shape{D_, in_[input]});
    }
    TensorView<const T> bias(const T* base, int input) const {
        if (!base) return {};
        return view(base + input * E_ + i_ * D_, Shape{D_});
    }

    const T *w_, *b_, *gw_, *gb_;
    Index i_, E_, D_;
    Index in_[3];
};

/// Multi-head attention (Vaswani et al. 2017, Section 3.2.2) with torch.nn.MultiheadAttention's
/// parameters, names, initialisation and semantics (batch_first = true):
///   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),  output = Concat(head_1..head_H) W^O + b^O.
/// The projection (fused, separate, per_head) changes how Q, K, V are computed, never the result.
template <class T>
class MultiheadAttention {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    using Options = MultiheadAttentionOptions;
    using StateDict = std::map<std::string, Tensor<T>>;

    /// Validates `options` and initialises the parameters as PyTorch does, from `seed`:
    /// in-projection xavier_uniform (the packed [3E, E] matrix as one tensor when kdim == vdim ==
    /// E, else each of q/k/v_proj_weight), in_proj_bias and out_proj.bias zero, out_proj.weight
    /// kaiming_uniform(a = sqrt 5), bias_k and bias_v xavier_normal. The same seed also drives the
    /// dropout stream. A new module is in training mode.
    explicit MultiheadAttention(const Options& options, std::uint64_t seed = 0);

    /// Multi-head attention of query [B, L, E] over key [B, S, kdim] and value [B, S, vdim]
    /// (or unbatched [L, E], [S, kdim], [S, vdim]). Checks every shape first.
    AttentionForward<T> forward(TensorView<const T> query, TensorView<const T> key,
                                TensorView<const T> value, const AttentionMasks<T>& masks = {});

    /// Gradients of sum(output ⊙ grad_output) for the call that produced `fwd`: returned for the
    /// arguments, added into this module's parameter gradients (until zero_grad()).
    AttentionGradients<T> backward(const AttentionForward<T>& fwd, TensorView<const T> grad_output);

    void zero_grad();
    void train(bool on = true) noexcept { training_ = on; }
    void eval() noexcept { training_ = false; }
    bool is_training() const noexcept { return training_; }

    /// Switches the projection computation; parameters and gradients stay as they are. Throws
    /// std::invalid_argument for a value that is no Projection enumerator.
    MultiheadAttention& with_projection(Projection projection) {
        detail::check_projection("headwise::MultiheadAttention::with_projection", "projection",
                                 projection);
        options_.projection = projection;
        return *this;
    }
    Projection projection() const noexcept { return options_.projection; }
    const Options& options() const noexcept { return options_; }
    Index embed_dim() const noexcept { return E_; }
    Index num_heads() const noexcept { return H_; }
    Index head_dim() const noexcept { return D_; }
    Index kdim() const noexcept { return kdim_; }
    Index vdim() const noexcept { return vdim_; }

    /// Parameters under torch.nn.MultiheadAttention.state_dict() names and shapes.
    StateDict state_dict() const;
    /// Strict: every expected entry present with its exact shape, nothing else; checked in full
    /// before anything is written.
    void load_state_dict(const StateDict& state);
    /// Gradients under the same names and shapes as state_dict().
    StateDict grad_dict() const;
    /// Views of every parameter and its gradient, under state_dict() names.
    std::vector<Parameter<T>> parameters();
    /// Number of learnt scalars (the same whatever the projection).
    Index parameter_count() const noexcept;

    /// Head i's in-projection matrices and biases, as views.
    HeadParameters<T> head(Index i) const;

private:
    struct Views;
    bool packed() const noexcept { return kdim_ == E_ && vdim_ == E_; }
    void check_masks(const AttentionMasks<T>& m, const detail::AttentionGeometry& g,
                     bool batched) const;

    Options options_;
    Index E_, H_, D_, kdim_, vdim_;
    Generator rng_;
    bool training_ = true;
    // Packed in-projection weights: Wq [E, E] | Wk [E, kdim] | Wv [E, vdim], one buffer, so
    // that with kdim == vdim == E it is in_proj_weight [3E, E] and every head's W_i is a
    // contiguous [D, in] row block of it.
    Tensor<T> w_in_, b_in_, w_out_, b_out_, bias_k_, bias_v_;
    Tensor<T> gw_in_, gb_in_, gw_out_, gb_out_, gbias_k_, gbias_v_;
    // Scratch reused by every call: forward's buffers that backward does not need (all of them
    // in eval mode), and backward's intermediates. Hence one module must not run two calls at
    // the same time; copies of it may.
    detail::Workspace<T> workspace_;
    enum : std::size_t { kWsKx, kWsVx, kWsP, kWsA, kWsCtx, kWsDctx, kWsY, kWsDy = kWsY + 3 };
};

// ================================================================================================

namespace detail {

/// What forward keeps for backward (training mode only).
template <class T>
struct AttentionSaved {
    AttentionGeometry g;
    Index Sx = 0;  // S plus the appended bias_k / zero-attention keys
    bool batched = true;
    bool self = false, kv_same = false;
    bool bias = true, bias_kv = false, zero_attn = false;
    T scale = T(0);
    ops::Dropout dropout;
    ProjectionPlan plan;
    Shape output_shape, shape_of[3];
    Tensor<T> x[3];            // inputs as [B N_i, in_i]; x[1], x[2] empty when shared
    int x_of[3] = {0, 1, 2};   // which x holds argument i
    std::vector<Tensor<T>> y;  // projection buffers (plan.buffers)
    Tensor<T> kx, vx;          // [B, H, S', D] when keys are appended, else empty
    Tensor<T> P;               // [B, H, L, S'] softmax probabilities
    Tensor<T> ctx;             // [B L, E] concatenated heads
};

/// [rows, D] block of (b, h) in `data` under layout `l` (read-only when `data` is const).
template <class T>
StridedMatrixMap<T> head_block(T* data, const HeadLayout& l, Index b, Index h, Index D) {
    return StridedMatrixMap<T>(data + l.offset + b * l.batch_stride + h * l.head_stride, l.rows, D,
                               Eigen::OuterStride<>(l.row_stride));
}

inline Shape merge_rows(const Shape& s) {  // [B, N, F] or [N, F] -> [B N, F]
    return Shape{s.numel() / s.back(), s.back()};
}

}  // namespace detail

template <class T>
MultiheadAttention<T>::MultiheadAttention(const Options& options, std::uint64_t seed)
    : options_(options), rng_(seed) {
    constexpr const char* fn = "headwise::MultiheadAttention::MultiheadAttention";
    if (options.embed_dim <= 0)
        throw_invalid_argument(fn, "options.embed_dim", "must be positive",
                               std::to_string(options.embed_dim));
    if (options.num_heads <= 0)
        throw_invalid_argument(fn, "options.num_heads", "must be positive",
                               std::to_string(options.num_heads));
    if (options.embed_dim % options.num_heads != 0)
        throw_invalid_argument(fn, "options.num_heads",
                               "must divide embed_dim = " + std::to_string(options.embed_dim),
                               std::to_string(options.num_heads));
    if (options.kdim < 0)
        throw_invalid_argument(fn, "options.kdim", "must be positive, or 0 for embed_dim",
                               std::to_string(options.kdim));
    if (options.vdim < 0)
        throw_invalid_argument(fn, "options.vdim", "must be positive, or 0 for embed_dim",
                               std::to_string(options.vdim));
    if (!(options.dropout >= 0.0 && options.dropout < 1.0))
        throw_invalid_argument(fn, "options.dropout", "must be in [0, 1)",
                               std::to_string(options.dropout));
    if (options.scale && !std::isfinite(*options.scale))
        throw_invalid_argument(fn, "options.scale", "must be finite, or unset for 1 / sqrt(D)",
                               std::to_string(*options.scale));
    detail::check_projection(fn, "options.projection", options.projection);
    E_ = options.embed_dim;
    H_ = options.num_heads;
    D_ = E_ / H_;
    kdim_ = options.kdim ? options.kdim : E_;
    vdim_ = options.vdim ? options.vdim : E_;
    // The in-projection [E, E + kdim + vdim] is the largest parameter (out_proj is [E, E], the
    // biases 3E): its element count and byte size must not overflow.
    Index in_features = 0, elements = 0, bytes = 0;
    if (__builtin_add_overflow(E_, kdim_, &in_features) ||
        __builtin_add_overflow(in_features, vdim_, &in_features) ||
        __builtin_mul_overflow(E_, in_features, &elements) ||
        __builtin_mul_overflow(elements, static_cast<Index>(sizeof(T)), &bytes))
        throw std::invalid_argument(
            std::string(fn) + ": options: embed_dim = " + std::to_string(E_) +
            ", kdim = " + std::to_string(kdim_) + ", vdim = " + std::to_string(vdim_) +
            ": the in-projection weights [embed_dim, embed_dim + kdim + vdim] overflow the "
            "address space");

    w_in_ = Tensor<T>(Shape{E_ * (E_ + kdim_ + vdim_)});
    gw_in_ = Tensor<T>(w_in_.shape());
    if (packed()) {
        // torch: xavier_uniform_(in_proj_weight) on the whole [3E, E] matrix.
        xavier_uniform_(w_in_.view().reshape(Shape{3 * E_, E_}), rng_);
    } else {
        // torch: xavier_uniform_ on q_proj_weight, k_proj_weight, v_proj_weight in turn.
        T* w = w_in_.data();
        xavier_uniform_(view(w, Shape{E_, E_}), rng_);
        xavier_uniform_(view(w + E_ * E_, Shape{E_, kdim_}), rng_);
        xavier_uniform_(view(w + E_ * (E_ + kdim_), Shape{E_, vdim_}), rng_);
    }
    w_out_ = Tensor<T>(Shape{E_, E_});
    gw_out_ = Tensor<T>(w_out_.shape());
    kaiming_uniform_(w_out_.view(), std::sqrt(5.0), rng_);
    if (options.bias) {  // torch: constant_(in_proj_bias, 0), constant_(out_proj.bias, 0)
        b_in_ = Tensor<T>(Shape{3 * E_});
        gb_in_ = Tensor<T>(b_in_.shape());
        b_out_ = Tensor<T>(Shape{E_});
        gb_out_ = Tensor<T>(b_out_.shape());
    }
    if (options.add_bias_kv) {  // torch: xavier_normal_ on [1, 1, E]: std = sqrt(2 / (E + E))
        bias_k_ = Tensor<T>(Shape{1, 1, E_});
        bias_v_ = Tensor<T>(Shape{1, 1, E_});
        const double std = std::sqrt(1.0 / static_cast<double>(E_));
        for (T& x : bias_k_) x = static_cast<T>(std * normal(rng_));
        for (T& x : bias_v_) x = static_cast<T>(std * normal(rng_));
        gbias_k_ = Tensor<T>(bias_k_.shape());
        gbias_v_ = Tensor<T>(bias_v_.shape());
    }
}

template <class T>
void MultiheadAttention<T>::check_masks(const AttentionMasks<T>& m,
                                        const detail::AttentionGeometry& g, bool batched) const {
    constexpr const char* fn = "headwise::MultiheadAttention::forward";
    const Shape ls{g.L, g.S};
    const Shape bhls{g.B, H_, g.L, g.S};
    const std::string two = ls.str() + " or " + bhls.str();
    // Only an absent (default-constructed) mask means none; an empty one of another shape is an
    // error like any wrong shape.
    if (!detail::mask_absent(m.attn_mask) && m.attn_mask.shape() != ls &&
        m.attn_mask.shape() != bhls)
        throw shape_error(fn, "masks.attn_mask", two, m.attn_mask.shape());
    if (!detail::mask_absent(m.attn_bias) && m.attn_bias.shape() != ls &&
        m.attn_bias.shape() != bhls)
        throw shape_error(fn, "masks.attn_bias", two, m.attn_bias.shape());
    if (!detail::mask_absent(m.key_padding_mask)) {
        const Shape expected = batched ? Shape{g.B, g.S} : Shape{g.S};
        detail::check_shape(fn, "masks.key_padding_mask", m.key_padding_mask.shape(), expected);
    }
}

template <class T>
AttentionForward<T> MultiheadAttention<T>::forward(TensorView<const T> query,
                                                   TensorView<const T> key,
                                                   TensorView<const T> value,
                                                   const AttentionMasks<T>& masks) {
    using detail::kKey;
    using detail::kQuery;
    using detail::kValue;
    constexpr const char* fn = "headwise::MultiheadAttention::forward";

    // ---- checks, before anything changes -----------------------------------------------------
    const std::string e = std::to_string(E_);
    if (query.rank() != 2 && query.rank() != 3)
        throw shape_error(fn, "query", "[B, L, " + e + "] or [L, " + e + "]", query.shape());
    const bool batched = query.rank() == 3;
    if (query.shape().back() != E_)
        throw shape_error(fn, "query", batched ? "[B, L, " + e + "]" : "[L, " + e + "]",
                          query.shape());
    const Index B = batched ? query.size(0) : 1;
    const Index L = query.size(-2);
    const std::string lead = batched ? "[" + std::to_string(B) + ", " : "[";
    if (key.rank() != query.rank() || (batched && key.size(0) != B) || key.shape().back() != kdim_)
        throw shape_error(fn, "key", lead + "S, " + std::to_string(kdim_) + "]", key.shape());
    const Index S = key.size(-2);
    if (batched) {
        detail::check_shape(fn, "value", value.shape(), Shape{B, S, vdim_});
    } else {
        detail::check_shape(fn, "value", value.shape(), Shape{S, vdim_});
    }
    const detail::AttentionGeometry g{B, L, S, E_, H_, D_, kdim_, vdim_};
    check_masks(masks, g, batched);
    // The scores [B, H, L, S + 2] (at most two appended keys) must be countable: Shape checks.
    static_cast<void>(Shape{B, H_, L, S + 2});

    // ---- set-up ----------------------------------------------------------------------------
    const bool kv_same = key.data() == value.data() && key.shape() == value.shape();
    const bool self = kv_same && query.data() == key.data() && query.shape() == key.shape();
    const bool bias_kv = options_.add_bias_kv, zero_attn = options_.add_zero_attn;
    const Index Sx = S + (bias_kv ? 1 : 0) + (zero_attn ? 1 : 0);  // keys after appending
    const bool training = training_;
    const T scale =
        options_.scale ? static_cast<T>(*options_.scale) : T(1) / std::sqrt(static_cast<T>(D_));
    ops::Dropout dropout;
    if (training && options_.dropout > 0.0) dropout = ops::Dropout{options_.dropout, rng_()};

    auto saved = std::make_shared<detail::AttentionSaved<T>>();
    detail::AttentionSaved<T>& s = *saved;
    s.g = g;
    s.Sx = Sx;
    s.batched = batched;
    s.self = self;
    s.kv_same = kv_same;
    s.bias = options_.bias;
    s.bias_kv = bias_kv;
    s.zero_attn = zero_attn;
    s.scale = scale;
    s.dropout = dropout;
    s.plan = detail::make_projection_plan(options_.projection, g, self, kv_same);
    s.shape_of[kQuery] = query.shape();
    s.shape_of[kKey] = key.shape();
    s.shape_of[kValue] = value.shape();
    s.output_shape = query.shape();

    // Inputs as matrices [B N, in]. Training keeps a copy for the weight gradients.
    const TensorView<const T> args[3] = {query.reshape(detail::merge_rows(query.shape())),
                                         key.reshape(detail::merge_rows(key.shape())),
                                         value.reshape(detail::merge_rows(value.shape()))};
    s.x_of[kKey] = self ? kQuery : kKey;
    s.x_of[kValue] = self ? kQuery : (kv_same ? kKey : kValue);

    // ---- 1. in-projection: Q = Xq Wq^T + bq, K = Xk Wk^T + bk, V = Xv Wv^T + bv --------------
    // Buffers backward needs live in `s` (training mode); the others in the workspace.
    std::vector<T*> y;  // projection buffers, plan.buffers[i] = [rows, cols]
    for (std::size_t i = 0; i < s.plan.buffers.size(); ++i) {
        const Shape shape{s.plan.buffers[i][0], s.plan.buffers[i][1]};
        if (training) {
            s.y.push_back(Tensor<T>::uninitialized(shape));  // written in full by the GEMMs
            y.push_back(s.y.back().data());
        } else {
            y.push_back(workspace_.get(kWsY + i, shape, false).data());
        }
    }
    for (const detail::ProjectionGemm& gm : s.plan.gemms) {
        const TensorView<const T>& X = args[gm.input];  // [B N, in]
        MatrixMap<const T> W(w_in_.data() + gm.w_offset, gm.w_rows, gm.in);
        const T* b = options_.bias ? b_in_.data() + gm.b_offset : nullptr;
        StridedMatrixMap<T> Y(y[static_cast<std::size_t>(gm.buffer)] + gm.y_offset, X.size(0),
                              gm.w_rows, Eigen::OuterStride<>(gm.y_stride));
        ops::linear_forward<T>(X.matrix(), W, b, Y);
    }
    detail::HeadLayout lq = s.plan.heads[kQuery], lk = s.plan.heads[kKey],
                       lv = s.plan.heads[kValue];
    const T* ydata[3] = {y[static_cast<std::size_t>(lq.buffer)],
                         y[static_cast<std::size_t>(lk.buffer)],
                         y[static_cast<std::size_t>(lv.buffer)]};

    // ---- 2. append bias_k / bias_v, then a zero key and value (torch's order) ----------------
    if (Sx != S) {
        const Shape shape{B, H_, Sx, D_};
        if (training) {  // every row written below
            s.kx = Tensor<T>::uninitialized(shape);
            s.vx = Tensor<T>::uninitialized(shape);
        }
        T* kx =
            training ? s.kx.data() : workspace_.get(kWsKx, shape, false).data();  // [B, H, S', D]
        T* vx =
            training ? s.vx.data() : workspace_.get(kWsVx, shape, false).data();  // [B, H, S', D]
        for (Index b = 0; b < B; ++b)
            for (Index h = 0; h < H_; ++h) {
                MatrixMap<T> Kx(kx + (b * H_ + h) * Sx * D_, Sx, D_);
                MatrixMap<T> Vx(vx + (b * H_ + h) * Sx * D_, Sx, D_);
                Kx.topRows(S) = detail::head_block(ydata[kKey], lk, b, h, D_);
                Vx.topRows(S) = detail::head_block(ydata[kValue], lv, b, h, D_);
                if (bias_kv) {
                    Kx.row(S) = MatrixMap<const T>(bias_k_.data() + h * D_, 1, D_);
                    Vx.row(S) = MatrixMap<const T>(bias_v_.data() + h * D_, 1, D_);
                }
                if (zero_attn) {  // the zero-attention key and value, last
                    Kx.row(Sx - 1).setZero();
                    Vx.row(Sx - 1).setZero();
                }
            }
        const detail::HeadLayout appended{0, 0, H_ * Sx * D_, Sx * D_, D_, Sx};
        lk = appended;
        lv = appended;
        ydata[kKey] = kx;
        ydata[kValue] = vx;
    }

    // ---- 3. attention per (batch, head): O_bh = dropout(softmax(scale Q K^T + mask)) V -------
    // P is kept whole [B, H, L, S'] when backward or the caller needs it; otherwise each thread
    // reuses one [L, S'] slice. Slices are independent, so they may run on several threads.
    const bool keep_p = training || masks.need_weights;
    const bool average = masks.need_weights && masks.average_attn_weights;
    const Index LS = L * Sx;
    const int threads = detail::max_threads();
    if (training) s.P = Tensor<T>::uninitialized(Shape{B, H_, L, Sx});  // written per slice
    const TensorView<T> P =
        training
            ? s.P.view()
            : workspace_.get(kWsP, keep_p ? Shape{B, H_, L, Sx} : Shape{threads, L, Sx}, false);
    const TensorView<T> A =
        workspace_.get(kWsA, dropout.active() ? Shape{threads, L, Sx} : Shape{0}, false);
    // Per-head weights after dropout, when they differ from P and are asked for.
    Tensor<T> weights = masks.need_weights && (!average || dropout.active())
                            ? Tensor<T>::uninitialized(Shape{B, H_, L, Sx})  // written per slice
                            : Tensor<T>();
    if (training) s.ctx = Tensor<T>::uninitialized(Shape{B * L, E_});  // heads written in turn
    const TensorView<T> ctx =
        training ? s.ctx.view()
                 : workspace_.get(kWsCtx, Shape{B * L, E_},
                                  false);  // [B L, E] = Concat(head_1, ..., head_H)
    const bool* attn_mask = masks.attn_mask.empty() ? nullptr : masks.attn_mask.data();
    const T* attn_bias = masks.attn_bias.empty() ? nullptr : masks.attn_bias.data();
    const bool per_slice_mask = masks.attn_mask.rank() == 4;
    const bool per_slice_bias = masks.attn_bias.rank() == 4;
    detail::parallel_for(B * H_, [&](Index slice, int thread) {
        const Index b = slice / H_, h = slice % H_;
        ops::ScoreMask<T> mask;
        if (attn_mask) mask.mask = attn_mask + (per_slice_mask ? slice * L * S : 0);
        mask.mask_ld = S;
        if (attn_bias) mask.bias = attn_bias + (per_slice_bias ? slice * L * S : 0);
        mask.bias_ld = S;
        if (!masks.key_padding_mask.empty())
            mask.key_padding = masks.key_padding_mask.data() + b * S;
        mask.causal = masks.is_causal;
        mask.causal_offset = ops::causal_offset(masks.causal_alignment, L, S);
        mask.masked_keys = S;
        MatrixMap<T> Pbh(P.data() + (keep_p ? slice : thread) * LS, L, Sx);  // [L, S']
        MatrixMap<T> Abh(dropout.active() ? A.data() + thread * LS : Pbh.data(), L, Sx);
        ops::attention_forward<T>(detail::head_block(ydata[kQuery], lq, b, h, D_),
                                  detail::head_block(ydata[kKey], lk, b, h, D_),
                                  detail::head_block(ydata[kValue], lv, b, h, D_), mask, scale,
                                  dropout, static_cast<std::uint64_t>(slice), Pbh, Abh,
                                  ctx.matrix().block(b * L, h * D_, L, D_));
        if (!weights.empty()) MatrixMap<T>(weights.data() + slice * LS, L, Sx) = Abh;
    });
    if (average) {
        // torch returns the weights after dropout, averaged over heads: [B, L, S'].
        const TensorView<const T> per_head =
            weights.empty() ? TensorView<const T>(P) : weights.view();  // [B, H, L, S']
        Tensor<T> avg(Shape{B, L, Sx});
        for (Index b = 0; b < B; ++b) {
            MatrixMap<T> Wb(avg.data() + b * LS, L, Sx);
            for (Index h = 0; h < H_; ++h)
                Wb += MatrixMap<const T>(per_head.data() + (b * H_ + h) * LS, L, Sx);
            Wb /= static_cast<T>(H_);
        }
        weights = std::move(avg);
    }

    // ---- 4. output = ctx W_o^T + b_o -----------------------------------------------------------
    AttentionForward<T> result;
    result.output = Tensor<T>::uninitialized(query.shape());  // [B, L, E], written in full
    ops::linear_forward<T>(ctx.matrix(), w_out_.matrix(), options_.bias ? b_out_.data() : nullptr,
                           result.output.view().reshape(Shape{B * L, E_}).matrix());
    if (masks.need_weights) {
        if (!batched) weights = std::move(weights).reshape(weights.shape().drop_front());
        result.attn_weights = std::move(weights);
    }
    if (training) {
        for (int i = 0; i < 3; ++i)
            if (s.x_of[i] == i) s.x[i] = Tensor<T>(args[i]);
        result.saved = std::move(saved);
    }
    return result;
}

template <class T>
AttentionGradients<T> MultiheadAttention<T>::backward(const AttentionForward<T>& fwd,
                                                      TensorView<const T> grad_output) {
    using detail::kKey;
    using detail::kQuery;
    using detail::kValue;
    constexpr const char* fn = "headwise::MultiheadAttention::backward";
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: holds nothing to differentiate (forward ran in eval "
                                    "mode); call train() before forward");
    const detail::AttentionSaved<T>& s = *fwd.saved;
    detail::check_shape(fn, "grad_output", grad_output.shape(), s.output_shape);
    {
        // Every option that fixes what forward saved; each mismatch named with both values.
        std::string other;
        const auto compare = [&](const char* option, Index expected, Index actual) {
            if (expected != actual)
                other += std::string(other.empty() ? "" : "; ") + option + ": expected " +
                         std::to_string(expected) + ", got " + std::to_string(actual);
        };
        compare("embed_dim", E_, s.g.E);
        compare("num_heads", H_, s.g.H);
        compare("kdim", kdim_, s.g.kdim);
        compare("vdim", vdim_, s.g.vdim);
        compare("bias", options_.bias, s.bias);
        compare("add_bias_kv", options_.add_bias_kv, s.bias_kv);
        compare("add_zero_attn", options_.add_zero_attn, s.zero_attn);
        if (!other.empty())
            throw std::invalid_argument(
                std::string(fn) + ": fwd: comes from a module with other options (" + other + ")");
    }
    const Index B = s.g.B, L = s.g.L, S = s.g.S, Sx = s.Sx, LS = L * Sx;

    // ---- 4. output = ctx W_o^T + b_o  ->  dctx = dout W_o, dW_o += dout^T ctx, db_o += sum dout
    const MatrixMap<const T> dout = grad_output.reshape(Shape{B * L, E_}).matrix();  // [B L, E]
    const TensorView<T> dctx = workspace_.get(kWsDctx, Shape{B * L, E_}, true);      // [B L, E]
    ops::linear_backward<T>(s.ctx.matrix(), w_out_.matrix(), dout, dctx.matrix(), gw_out_.matrix(),
                            options_.bias ? gb_out_.data() : nullptr);

    // ---- 3. attention per (batch, head), in reverse -------------------------------------------
    std::vector<T*> dy;  // gradients of the projection buffers, same layouts
    for (std::size_t i = 0; i < s.plan.buffers.size(); ++i)
        dy.push_back(
            workspace_.get(kWsDy + i, Shape{s.plan.buffers[i][0], s.plan.buffers[i][1]}, true)
                .data());
    detail::HeadLayout lq = s.plan.heads[kQuery], lk = s.plan.heads[kKey],
                       lv = s.plan.heads[kValue];
    const T* ydata[3] = {s.y[static_cast<std::size_t>(lq.buffer)].data(),
                         s.y[static_cast<std::size_t>(lk.buffer)].data(),
                         s.y[static_cast<std::size_t>(lv.buffer)].data()};
    T* dq = dy[static_cast<std::size_t>(lq.buffer)];
    T* dk = dy[static_cast<std::size_t>(lk.buffer)];
    T* dv = dy[static_cast<std::size_t>(lv.buffer)];
    TensorView<T> dkx, dvx;  // [B, H, S', D] when keys were appended
    const detail::HeadLayout lk_proj = lk, lv_proj = lv;
    if (Sx != S) {
        dkx = workspace_.get(kWsKx, s.kx.shape(), true);
        dvx = workspace_.get(kWsVx, s.vx.shape(), true);
        const detail::HeadLayout appended{0, 0, H_ * Sx * D_, Sx * D_, D_, Sx};
        lk = appended;
        lv = appended;
        ydata[kKey] = s.kx.data();
        ydata[kValue] = s.vx.data();
        dk = dkx.data();
        dv = dvx.data();
    }
    const int threads = detail::max_threads();
    const TensorView<T> scratch =
        workspace_.get(kWsP, Shape{threads, L, Sx}, false);  // [threads, L, S']
    detail::parallel_for(B * H_, [&](Index slice, int thread) {
        const Index b = slice / H_, h = slice % H_;
        ops::attention_backward<T>(
            detail::head_block(ydata[kQuery], lq, b, h, D_),
            detail::head_block(ydata[kKey], lk, b, h, D_),
            detail::head_block(ydata[kValue], lv, b, h, D_),
            MatrixMap<const T>(s.P.data() + slice * LS, L, Sx), s.scale, s.dropout,
            static_cast<std::uint64_t>(slice), dctx.matrix().block(b * L, h * D_, L, D_),
            MatrixMap<T>(scratch.data() + thread * LS, L, Sx), detail::head_block(dq, lq, b, h, D_),
            detail::head_block(dk, lk, b, h, D_), detail::head_block(dv, lv, b, h, D_));
    });

    // ---- 2. appended keys: bias_k, bias_v collect their rows; the zero row has no parameter --
    if (Sx != S) {
        T* dk_proj = dy[static_cast<std::size_t>(lk_proj.buffer)];
        T* dv_proj = dy[static_cast<std::size_t>(lv_proj.buffer)];
        for (Index b = 0; b < B; ++b)
            for (Index h = 0; h < H_; ++h) {
                MatrixMap<const T> dKx(dkx.data() + (b * H_ + h) * Sx * D_, Sx, D_);
                MatrixMap<const T> dVx(dvx.data() + (b * H_ + h) * Sx * D_, Sx, D_);
                detail::head_block(dk_proj, lk_proj, b, h, D_) += dKx.topRows(S);
                detail::head_block(dv_proj, lv_proj, b, h, D_) += dVx.topRows(S);
                if (s.bias_kv) {
                    MatrixMap<T>(gbias_k_.data() + h * D_, 1, D_) += dKx.row(S);
                    MatrixMap<T>(gbias_v_.data() + h * D_, 1, D_) += dVx.row(S);
                }
            }
    }

    // ---- 1. in-projection, in reverse: dW += dY^T X and db += sum dY per GEMM; dX per segment
    AttentionGradients<T> grads;
    Tensor<T> dx[3];
    for (int i = 0; i < 3; ++i)
        dx[i] = Tensor<T>(
            Shape{s.g.B * (i == kQuery ? L : S), i == kQuery ? E_ : (i == kKey ? kdim_ : vdim_)});
    for (const detail::ProjectionGemm& gm : s.plan.gemms) {
        const Tensor<T>& X = s.x[s.x_of[gm.input]];  // [B N, in]
        MatrixMap<const T> W(w_in_.data() + gm.w_offset, gm.w_rows, gm.in);
        StridedMatrixMap<T> dY(dy[static_cast<std::size_t>(gm.buffer)] + gm.y_offset, X.size(0),
                               gm.w_rows, Eigen::OuterStride<>(gm.y_stride));
        MatrixMap<T> dW(gw_in_.data() + gm.w_offset, gm.w_rows, gm.in);
        ops::linear_backward_weight<T>(dY, X.matrix(), dW);
        if (options_.bias) ops::linear_backward_bias<T>(dY, gb_in_.data() + gm.b_offset);
        for (int k = 0; k < gm.segment_count; ++k) {
            const detail::Segment& seg = gm.segments[static_cast<std::size_t>(k)];
            ops::linear_backward_input<T>(dY.middleCols(seg.row0, seg.rows),
                                          W.middleRows(seg.row0, seg.rows), dx[seg.input].matrix());
        }
    }
    grads.query = std::move(dx[kQuery]).reshape(s.shape_of[kQuery]);
    grads.key = std::move(dx[kKey]).reshape(s.shape_of[kKey]);
    grads.value = std::move(dx[kValue]).reshape(s.shape_of[kValue]);
    return grads;
}

template <class T>
void MultiheadAttention<T>::zero_grad() {
    for (Tensor<T>* g : {&gw_in_, &gb_in_, &gw_out_, &gb_out_, &gbias_k_, &gbias_v_}) g->fill(T(0));
}

template <class T>
struct MultiheadAttention<T>::Views {
    // (name, parameter, gradient) in torch's state_dict order; read-only views for a const m.
    template <class Module>
    static auto of(Module& m) {
        using View = decltype(m.w_in_.view());
        std::vector<std::tuple<std::string, View, View>> v;
        const Index E = m.E_;
        if (m.packed()) {
            v.emplace_back("in_proj_weight", m.w_in_.view().reshape(Shape{3 * E, E}),
                           m.gw_in_.view().reshape(Shape{3 * E, E}));
        } else {
            const Index off[3] = {0, E * E, E * (E + m.kdim_)};
            const Index in[3] = {E, m.kdim_, m.vdim_};
            const char* names[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
            for (int i = 0; i < 3; ++i)
                v.emplace_back(names[i], view(m.w_in_.data() + off[i], Shape{E, in[i]}),
                               view(m.gw_in_.data() + off[i], Shape{E, in[i]}));
        }
        if (m.options_.bias) v.emplace_back("in_proj_bias", m.b_in_.view(), m.gb_in_.view());
        if (m.options_.add_bias_kv) {
            v.emplace_back("bias_k", m.bias_k_.view(), m.gbias_k_.view());
            v.emplace_back("bias_v", m.bias_v_.view(), m.gbias_v_.view());
        }
        v.emplace_back("out_proj.weight", m.w_out_.view(), m.gw_out_.view());
        if (m.options_.bias) v.emplace_back("out_proj.bias", m.b_out_.view(), m.gb_out_.view());
        return v;
    }
};

template <class T>
std::vector<Parameter<T>> MultiheadAttention<T>::parameters() {
    std::vector<Parameter<T>> out;
    for (auto& [name, value, grad] : Views::of(*this))
        out.push_back(Parameter<T>{name, value, grad});
    return out;
}

template <class T>
typename MultiheadAttention<T>::StateDict MultiheadAttention<T>::state_dict() const {
    StateDict sd;
    for (auto& [name, value, grad] : Views::of(*this))
        sd.emplace(name, Tensor<T>(TensorView<const T>(value)));
    return sd;
}

template <class T>
typename MultiheadAttention<T>::StateDict MultiheadAttention<T>::grad_dict() const {
    StateDict sd;
    for (auto& [name, value, grad] : Views::of(*this))
        sd.emplace(name, Tensor<T>(TensorView<const T>(grad)));
    return sd;
}

template <class T>
void MultiheadAttention<T>::load_state_dict(const StateDict& state) {
    const auto views = Views::of(*this);
    detail::ParameterShapes expected;
    for (const auto& [name, value, grad] : views) expected.emplace_back(name, value.shape());
    detail::check_state_dict("headwise::MultiheadAttention::load_state_dict", state, expected);
    for (const auto& [name, value, grad] : views) {
        const Tensor<T>& src = state.at(name);
        std::copy(src.begin(), src.end(), value.data());
    }
}

template <class T>
Index MultiheadAttention<T>::parameter_count() const noexcept {
    return w_in_.numel() + (options_.bias ? b_in_.numel() + b_out_.numel() : 0) + w_out_.numel() +
           (options_.add_bias_kv ? bias_k_.numel() + bias_v_.numel() : 0);
}

template <class T>
HeadParameters<T> MultiheadAttention<T>::head(Index i) const {
    if (i < 0 || i >= H_)
        throw_invalid_argument("headwise::MultiheadAttention::head", "i",
                               "must be in [0, " + std::to_string(H_) + ")", std::to_string(i));
    return HeadParameters<T>(w_in_.data(), options_.bias ? b_in_.data() : nullptr, gw_in_.data(),
                             options_.bias ? gb_in_.data() : nullptr, i, E_, D_, kdim_, vdim_);
}

}  // namespace headwise
