// SPDX-License-Identifier: MIT
// MultiheadAttention<T>: torch.nn.MultiheadAttention's parameters, forward and backward, with the
// Q/K/V projections computed fused, separately or per head.
#pragma once

#include <Eigen/Core>

#include <algorithm>    // std::copy
#include <cmath>        // std::sqrt
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <memory>       // std::shared_ptr, std::make_shared
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::remove_const_t
#include <utility>      // std::move

#include "../../config.hpp"
#include "../../detail/parallel.hpp"
#include "../../error.hpp"
#include "../../init.hpp"
#include "../../ops/attention.hpp"
#include "../../ops/blocked_attention.hpp"
#include "../../ops/cached_attention.hpp"
#include "../../ops/dropout.hpp"
#include "../../ops/linear.hpp"
#include "../../random.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "../module.hpp"
#include "activations.hpp"
#include "in_proj_layout.hpp"
#include "kv_cache.hpp"
#include "options.hpp"
#include "projection_plan.hpp"

namespace headwise {

template <class T>
class MultiheadAttention;

/// What forward returns. Keep it until backward: it holds what backward needs (in training mode;
/// in eval mode it holds nothing but the results).
template <class T>
struct AttentionForward {
    Tensor<T> output;        // [B, L, E] ([L, E] for an unbatched call)
    Tensor<T> attn_weights;  // [B, L, Sx] or [B, H, L, Sx] when need_weights, else empty
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
    // Self-attention with AttentionBackwardOptions::combine_self: the one tensor's gradient,
    // query + key + value (which are then empty). Empty otherwise.
    Tensor<T> input;
};

/// Head i's slices of the in-projection, as views into the packed parameters (no copy):
/// W_i^Q [D, E], W_i^K [D, kdim], W_i^V [D, vdim] in PyTorch's (out, in) layout, so that
/// Q_i = X W_i^Q^T + b_i^Q. The paper's W_i^Q (E x D) is the transpose of q_weight().
/// HeadParameters<T> (from a non-const module) writes through to the module's parameters;
/// HeadParameters<const T> (from a const module) only reads. Bias views are empty without bias.
template <class T>
class HeadParameters {
public:
    TensorView<T> q_weight() const { return weight(w_, detail::kQuery); }
    TensorView<T> k_weight() const { return weight(w_, detail::kKey); }
    TensorView<T> v_weight() const { return weight(w_, detail::kValue); }
    TensorView<T> q_bias() const { return bias(b_, detail::kQuery); }
    TensorView<T> k_bias() const { return bias(b_, detail::kKey); }
    TensorView<T> v_bias() const { return bias(b_, detail::kValue); }
    TensorView<T> q_weight_grad() const { return weight(gw_, detail::kQuery); }
    TensorView<T> k_weight_grad() const { return weight(gw_, detail::kKey); }
    TensorView<T> v_weight_grad() const { return weight(gw_, detail::kValue); }
    TensorView<T> q_bias_grad() const { return bias(gb_, detail::kQuery); }
    TensorView<T> k_bias_grad() const { return bias(gb_, detail::kKey); }
    TensorView<T> v_bias_grad() const { return bias(gb_, detail::kValue); }

private:
    template <class>
    friend class MultiheadAttention;
    HeadParameters(T* w, T* b, T* gw, T* gb, const detail::InProjLayout& layout, Index i)
        : w_(w), b_(b), gw_(gw), gb_(gb), layout_(layout), i_(i) {}

    // Query head i reads key/value head layout_.kv_head(i): one block for the whole group.
    Index head_of(int input) const noexcept {
        return input == detail::kQuery ? i_ : layout_.kv_head(i_);
    }
    TensorView<T> weight(T* base, int input) const {
        return view(base + layout_.weight_offset(input, head_of(input)),
                    Shape{layout_.D, layout_.in(input)});
    }
    TensorView<T> bias(T* base, int input) const {
        if (!base) return {};
        return view(base + layout_.bias_offset(input, head_of(input)), Shape{layout_.D});
    }

    T *w_, *b_, *gw_, *gb_;
    detail::InProjLayout layout_;
    Index i_;
};

/// Multi-head attention (Vaswani et al. 2017, Section 3.2.2) with torch.nn.MultiheadAttention's
/// parameters, names, initialisation and semantics (batch_first = true):
///   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),  output = Concat(head_1..head_H) W^O + b^O.
/// The projection (fused, separate, per_head) changes how Q, K, V are computed, never the result.
/// Follows the module contract (layers/module.hpp): parameters(), zero_grad(), state_dict(),
/// load_state_dict(), grad_dict(), train()/eval().
template <class T>
class MultiheadAttention : public Module<MultiheadAttention<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);
    using Base = Module<MultiheadAttention<T>, T>;
    friend Base;

public:
    using Options = MultiheadAttentionOptions;
    using StateDict = typename Base::StateDict;
    static constexpr const char* kName = "headwise::MultiheadAttention";

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
    AttentionGradients<T> backward(const AttentionForward<T>& fwd, TensorView<const T> grad_output,
                                   const AttentionBackwardOptions& options = {});

    /// Switches the projection computation; parameters and gradients stay as they are. Throws
    /// std::invalid_argument for a value that is no Projection enumerator.
    MultiheadAttention& with_projection(Projection projection) {
        detail::check_projection("headwise::MultiheadAttention::with_projection", "projection",
                                 projection);
        options_.projection = projection;
        return *this;
    }
    Projection projection() const noexcept { return options_.projection; }
    /// The kernel a call of L queries over S keys (before the appended bias_k and zero-attention
    /// keys) runs: options().attention_kernel when it forces one, else the automatic choice.
    AttentionKernel kernel_for(Index L, Index S, bool need_weights) const noexcept;
    const Options& options() const noexcept { return options_; }
    Index embed_dim() const noexcept { return layout_.E; }
    Index num_heads() const noexcept { return layout_.H; }
    /// Key/value heads Hkv: num_heads for multi-head attention, fewer for grouped-query.
    Index num_kv_heads() const noexcept { return layout_.kv_heads; }
    Index head_dim() const noexcept { return layout_.D; }
    Index kdim() const noexcept { return layout_.kdim; }
    Index vdim() const noexcept { return layout_.vdim; }

    /// Head i's in-projection matrices and biases, as views: writable on a non-const module.
    HeadParameters<T> head(Index i);
    HeadParameters<const T> head(Index i) const;

    /// A cache for decode(): room for the keys and values of `capacity` tokens of `batch`
    /// sequences, per key/value head ([B, Hkv, capacity, D] each). decode is self-attention, so
    /// the module needs kdim == vdim == embed_dim.
    KVCache<T> make_kv_cache(Index batch, Index capacity) const;

    /// Incremental decoding: causal self-attention of new tokens x_new [B, T, E] (or [T, E] with
    /// a batch-1 cache) over the cached tokens and themselves, in eval mode. Projects x_new only,
    /// appends its keys and values to the cache, and returns y [B, T, E], where new token t
    /// attends every cached token and the new tokens up to itself (bottom-right causal), then the
    /// bias_k and zero-attention keys when the module has them. Feeding a sequence in chunks of
    /// any sizes gives the outputs of one forward(x, x, x) with is_causal in eval mode.
    /// `key_padding` [B, T] ([T]), true = padding, marks new tokens that no token may attend (see
    /// KVCache). Everything is checked first (training mode, shapes, the cache's dimensions, room
    /// for T tokens); on an error the cache is unchanged.
    Tensor<T> decode(TensorView<const T> x_new, KVCache<T>& cache,
                     TensorView<const bool> key_padding = {});
    /// decode() writing into `out` (x_new's shape): allocates nothing once the cache's scratch
    /// has been sized by a first call with as many new tokens.
    void decode_into(TensorView<const T> x_new, KVCache<T>& cache, TensorView<T> out,
                     TensorView<const bool> key_padding = {});

    /// Every parameter and its gradient as (name, value view, gradient view), under
    /// torch.nn.MultiheadAttention.state_dict() names and shapes, in its order.
    template <class Self, class Visit>
    static void visit_parameters(Self& m, Visit&& visit);
    /// The generator each training forward draws its dropout key from (Module::random_state).
    template <class Self, class Visit>
    static void visit_random_state(Self& m, Visit&& visit) {
        visit(m.rng_);
    }

private:
    detail::AttentionGeometry check_forward(TensorView<const T> query, TensorView<const T> key,
                                            TensorView<const T> value,
                                            const AttentionMasks<T>& masks) const;
    void check_same_options(const detail::AttentionCall<T>& c) const;
    void check_masks(const AttentionMasks<T>& m, const detail::AttentionGeometry& g,
                     bool batched) const;
    void set_up_call(detail::AttentionActivations<T>& a, const detail::AttentionGeometry& g,
                     TensorView<const T> query, TensorView<const T> key, TensorView<const T> value);
    ops::ScoreMask<T> score_mask(const AttentionMasks<T>& m, Index b, Index h,
                                 const detail::AttentionGeometry& g) const;
    MatrixMap<const T> in_weight(const detail::ProjectionGemm& gm) const {
        return MatrixMap<const T>(w_in_.data() + gm.w_offset, gm.w_rows, gm.in);
    }

    Options options_;
    detail::InProjLayout layout_;  // where Wq, Wk, Wv and the heads sit in w_in_, b_in_
    Generator rng_;
    Tensor<T> w_in_, b_in_, w_out_, b_out_, bias_k_, bias_v_;
    Tensor<T> gw_in_, gb_in_, gw_out_, gb_out_, gbias_k_, gbias_v_;
    // Buffers reused by every call: an eval-mode forward's activations, backward's gradients, and
    // the spare training activations a finished call hands back. Hence one module must not run
    // two calls at the same time; copies of it may (a copy starts with buffers of its own).
    detail::AttentionActivations<T> eval_activations_;
    detail::AttentionActivations<T> gradients_;
    detail::ActivationPool<T> pool_;
};

// ================================================================================================

namespace detail {

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
    if (options.num_kv_heads < 0 ||
        (options.num_kv_heads > 0 && options.num_heads % options.num_kv_heads != 0))
        throw_invalid_argument(fn, "options.num_kv_heads",
                               "must divide num_heads = " + std::to_string(options.num_heads) +
                                   ", or be 0 for num_heads",
                               std::to_string(options.num_kv_heads));
    detail::check_scale<T>(fn, options.scale);
    detail::check_projection(fn, "options.projection", options.projection);
    detail::check_tiles(fn, options.attention_tiles, "options.attention_tiles");
    detail::InProjLayout& w = layout_;
    w.E = options.embed_dim;
    w.H = options.num_heads;
    w.D = w.E / w.H;
    w.kdim = options.kdim ? options.kdim : w.E;
    w.vdim = options.vdim ? options.vdim : w.E;
    w.kv_heads = options.num_kv_heads ? options.num_kv_heads : w.H;
    // The in-projection [E, E + kdim + vdim] is the largest parameter (out_proj is [E, E], the
    // biases 3E): its element count and byte size must not overflow.
    Index in_features = 0, elements = 0, bytes = 0;
    if (__builtin_add_overflow(w.E, w.kdim, &in_features) ||
        __builtin_add_overflow(in_features, w.vdim, &in_features) ||
        __builtin_mul_overflow(w.E, in_features, &elements) ||
        __builtin_mul_overflow(elements, static_cast<Index>(sizeof(T)), &bytes))
        throw std::invalid_argument(
            std::string(fn) + ": options: embed_dim = " + std::to_string(w.E) +
            ", kdim = " + std::to_string(w.kdim) + ", vdim = " + std::to_string(w.vdim) +
            ": the in-projection weights [embed_dim, embed_dim + kdim + vdim] overflow the "
            "address space");

    w_in_ = Tensor<T>(Shape{w.weight_size()});
    gw_in_ = Tensor<T>(w_in_.shape());
    if (w.packed()) {
        // torch: xavier_uniform_(in_proj_weight) on the whole [3E, E] matrix ([E + 2 Hkv D, E]).
        xavier_uniform_(w_in_.view().reshape(Shape{w.packed_rows(), w.E}), rng_);
    } else {
        // torch: xavier_uniform_ on q_proj_weight, k_proj_weight, v_proj_weight in turn.
        for (int i : {detail::kQuery, detail::kKey, detail::kValue})
            xavier_uniform_(view(w_in_.data() + w.weight_offset(i), w.weight_shape(i)), rng_);
    }
    w_out_ = Tensor<T>(Shape{w.E, w.E});
    gw_out_ = Tensor<T>(w_out_.shape());
    kaiming_uniform_(w_out_.view(), std::sqrt(5.0), rng_);
    if (options.bias) {  // torch: constant_(in_proj_bias, 0), constant_(out_proj.bias, 0)
        b_in_ = Tensor<T>(Shape{w.bias_size()});
        gb_in_ = Tensor<T>(b_in_.shape());
        b_out_ = Tensor<T>(Shape{w.E});
        gb_out_ = Tensor<T>(b_out_.shape());
    }
    if (options.add_bias_kv) {
        // torch: xavier_normal_ on [1, 1, E]: std = sqrt(2 / (E + E)). With Hkv key/value heads
        // they are [1, 1, Hkv D], one slice per key/value head, and std = sqrt(1 / (Hkv D)).
        const Index kv = w.rows(detail::kKey);
        bias_k_ = Tensor<T>(Shape{1, 1, kv});
        bias_v_ = Tensor<T>(Shape{1, 1, kv});
        const double sigma = std::sqrt(1.0 / static_cast<double>(kv));
        for (T& x : bias_k_) x = static_cast<T>(sigma * normal(rng_));
        for (T& x : bias_v_) x = static_cast<T>(sigma * normal(rng_));
        gbias_k_ = Tensor<T>(bias_k_.shape());
        gbias_v_ = Tensor<T>(bias_v_.shape());
    }
}

template <class T>
detail::AttentionGeometry MultiheadAttention<T>::check_forward(
    TensorView<const T> query, TensorView<const T> key, TensorView<const T> value,
    const AttentionMasks<T>& masks) const {
    constexpr const char* fn = "headwise::MultiheadAttention::forward";
    const Index E = layout_.E, kdim = layout_.kdim, vdim = layout_.vdim;
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
        detail::check_shape(fn, "value", value.shape(), Shape{B, S, vdim});
    } else {
        detail::check_shape(fn, "value", value.shape(), Shape{S, vdim});
    }
    // Keys after appending bias_k / bias_v, then the zero-attention key.
    const Index Sx = S + (options_.add_bias_kv ? 1 : 0) + (options_.add_zero_attn ? 1 : 0);
    const detail::AttentionGeometry g{B, L, S, Sx};
    check_masks(masks, g, batched);
    // The scores [B, H, L, S + 2] (at most two appended keys) must be countable: Shape checks.
    static_cast<void>(Shape{B, layout_.H, L, S + 2});
    return g;
}

template <class T>
void MultiheadAttention<T>::check_masks(const AttentionMasks<T>& m,
                                        const detail::AttentionGeometry& g, bool batched) const {
    constexpr const char* fn = "headwise::MultiheadAttention::forward";
    const Shape ls{g.L, g.S};
    const Shape bhls{g.B, layout_.H, g.L, g.S};
    const auto two = [&] { return ls.str() + " or " + bhls.str(); };
    // Only an absent (default-constructed) mask means none; an empty one of another shape is an
    // error like any wrong shape.
    if (!detail::mask_absent(m.attn_mask) && m.attn_mask.shape() != ls &&
        m.attn_mask.shape() != bhls)
        throw shape_error(fn, "masks.attn_mask", two(), m.attn_mask.shape());
    if (!detail::mask_absent(m.attn_bias) && m.attn_bias.shape() != ls &&
        m.attn_bias.shape() != bhls)
        throw shape_error(fn, "masks.attn_bias", two(), m.attn_bias.shape());
    if (!detail::mask_absent(m.key_padding_mask)) {
        const Shape expected = batched ? Shape{g.B, g.S} : Shape{g.S};
        detail::check_shape(fn, "masks.key_padding_mask", m.key_padding_mask.shape(), expected);
    }
}

template <class T>
void MultiheadAttention<T>::check_same_options(const detail::AttentionCall<T>& c) const {
    // Every option that fixes what forward computed and saved; each mismatch named with both
    // values. Equal options give equal layouts, so backward walks forward's buffers in bounds.
    const std::string other = detail::differing_options<T>(options_, c.options);
    if (!other.empty())
        throw std::invalid_argument(
            "headwise::MultiheadAttention::backward: fwd: comes from a "
            "module with other options (" +
            other + ")");
    HEADWISE_ASSERT(c.layout() == layout_);
}

template <class T>
void MultiheadAttention<T>::set_up_call(detail::AttentionActivations<T>& a,
                                        const detail::AttentionGeometry& g,
                                        TensorView<const T> query, TensorView<const T> key,
                                        TensorView<const T> value) {
    const bool kv_same = key.data() == value.data() && key.shape() == value.shape();
    const bool self = kv_same && query.data() == key.data() && query.shape() == key.shape();
    a.plan_for(detail::ProjectionKey{options_.projection, layout_, g, self, kv_same});
    detail::AttentionCall<T>& c = a.call;
    c.options = options_;
    c.batched = query.rank() == 3;
    c.bias = options_.bias;
    c.bias_kv = options_.add_bias_kv;
    c.zero_attn = options_.add_zero_attn;
    c.scale = detail::attention_scale<T>(options_);
    c.dropout = ops::Dropout{};
    if (this->training_ && options_.dropout > 0.0)
        c.dropout = ops::Dropout{options_.dropout, rng_()};
    c.shape_of[detail::kQuery] = query.shape();
    c.shape_of[detail::kKey] = key.shape();
    c.shape_of[detail::kValue] = value.shape();
    c.x_of[detail::kKey] = self ? detail::kQuery : detail::kKey;
    c.x_of[detail::kValue] = self ? detail::kQuery : (kv_same ? detail::kKey : detail::kValue);
}

template <class T>
ops::ScoreMask<T> MultiheadAttention<T>::score_mask(const AttentionMasks<T>& m, Index b, Index h,
                                                    const detail::AttentionGeometry& g) const {
    const Index slice = b * layout_.H + h, LS = g.L * g.S;
    ops::ScoreMask<T> mask;
    if (!m.attn_mask.empty())
        mask.mask = m.attn_mask.data() + (m.attn_mask.rank() == 4 ? slice * LS : 0);
    mask.mask_ld = g.S;
    if (!m.attn_bias.empty())
        mask.bias = m.attn_bias.data() + (m.attn_bias.rank() == 4 ? slice * LS : 0);
    mask.bias_ld = g.S;
    if (!m.key_padding_mask.empty()) mask.key_padding = m.key_padding_mask.data() + b * g.S;
    mask.causal = m.is_causal;
    mask.causal_offset = ops::causal_offset(m.causal_alignment, g.L, g.S);
    mask.masked_keys = g.S;
    return mask;
}

/// Most scores per (batch, head) slice for which AttentionKernel::automatic runs the materialised
/// kernel; above, the blocked one. Up to here an [L, Sx] slice is at most 1 MiB in float and the
/// materialised kernel is measured faster, in forward and in training, where its backward does
/// one product fewer (README, "Long sequences"); beyond, the [B, H, L, Sx] probabilities that
/// training would keep grow with the square of the length.
inline constexpr Index kMaterialisedMaxScores = 512 * 512;

template <class T>
AttentionKernel MultiheadAttention<T>::kernel_for(Index L, Index S,
                                                  bool need_weights) const noexcept {
    if (options_.attention_kernel != AttentionKernel::automatic) return options_.attention_kernel;
    const Index Sx = S + (options_.add_bias_kv ? 1 : 0) + (options_.add_zero_attn ? 1 : 0);
    return !need_weights && L * Sx > kMaterialisedMaxScores ? AttentionKernel::blocked
                                                            : AttentionKernel::materialised;
}

template <class T>
AttentionForward<T> MultiheadAttention<T>::forward(TensorView<const T> query,
                                                   TensorView<const T> key,
                                                   TensorView<const T> value,
                                                   const AttentionMasks<T>& masks) {
    using detail::kKey;
    using detail::kQuery;
    using detail::kValue;
    const detail::AttentionGeometry g = check_forward(query, key, value, masks);  // throws first
    const Index B = g.B, L = g.L, S = g.S, Sx = g.Sx, H = layout_.H, D = layout_.D;
    const Index Hkv = layout_.kv_heads;

    // ---- 0. the call's activations: kept for backward in training mode, the module's own in
    // eval mode; every buffer sized once, here. P is kept whole [B, H, L, Sx] when backward or
    // the caller needs it, else each thread reuses one [L, Sx] slice.
    std::shared_ptr<detail::AttentionSaved<T>> saved;
    if (this->training_) saved = pool_.make_saved();
    detail::AttentionActivations<T>& a = saved ? *saved->activations : eval_activations_;
    set_up_call(a, g, query, key, value);
    a.call.blocked = kernel_for(L, S, masks.need_weights) == AttentionKernel::blocked;
    a.call.tiles = detail::call_tiles(options_.attention_tiles, L, Sx);
    // A blocked backward applies the masks again: training keeps a copy of them.
    a.call.masks = this->training_ && a.call.blocked ? masks : AttentionMasks<T>{};
    const detail::AttentionCall<T>& c = a.call;
    a.size_forward(!c.blocked && this->training_, c.dropout.active(), detail::max_threads());
    a.set_inputs({query.reshape(detail::merge_rows(query.shape())),   // [B L, E]
                  key.reshape(detail::merge_rows(key.shape())),       // [B S, kdim]
                  value.reshape(detail::merge_rows(value.shape()))},  // [B S, vdim]
                 this->training_ && !options_.reference_inputs);

    // ---- 1. in-projection: Q = Xq Wq^T + bq, K = Xk Wk^T + bk, V = Xv Wv^T + bv --------------
    for (const detail::ProjectionGemm& gm : c.plan.gemms)
        ops::linear_forward<T>(a.x(gm.input).matrix(), in_weight(gm),
                               options_.bias ? b_in_.data() + gm.b_offset : nullptr, a.y(gm));

    // ---- 2. append bias_k / bias_v, then a zero key and value (torch's order) ----------------
    if (a.appended())
        for (Index b = 0; b < B; ++b)
            for (Index h = 0; h < Hkv; ++h) {                // key/value heads
                a.k(b, h).topRows(S) = a.k_projected(b, h);  // [S, D]
                a.v(b, h).topRows(S) = a.v_projected(b, h);  // [S, D]
                if (c.bias_kv) {
                    a.k(b, h).row(S) = MatrixMap<const T>(bias_k_.data() + h * D, 1, D);
                    a.v(b, h).row(S) = MatrixMap<const T>(bias_v_.data() + h * D, 1, D);
                }
                if (c.zero_attn) {  // the zero-attention key and value, last
                    a.k(b, h).row(Sx - 1).setZero();
                    a.v(b, h).row(Sx - 1).setZero();
                }
            }

    // ---- 3. attention per (batch, head): O_bh = dropout(softmax(scale Q K^T + mask)) V -------
    // Query head h reads key/value head kv_head(h).
    // Blocked kernel: tile by tile, keeping LSE_bh [L]; materialised: P_bh [L, Sx] whole.
    // The weights, when asked for, are the probabilities after dropout (as torch returns them):
    // per head [B, H, L, Sx], or averaged over the heads [B, L, Sx], summed into one [L, Sx]
    // matrix per batch as each head is done, so that no [B, H, L, Sx] is held for them. Slices
    // are independent and may run on several threads; with averaged weights a thread takes the
    // heads of one batch in turn (they add into the same matrix).
    const bool average = masks.need_weights && masks.average_attn_weights;
    Tensor<T> weights;
    if (masks.need_weights)
        weights = average ? Tensor<T>(Shape{B, L, Sx})  // zero: the heads are added in
                          : Tensor<T>::uninitialized(Shape{B, H, L, Sx});  // written per slice
    const auto attend = [&](Index b, Index h, int thread) {
        const Index slice = b * H + h, kv = layout_.kv_head(h);
        const auto stream = static_cast<std::uint64_t>(slice);
        const ops::ScoreMask<T> mask = score_mask(masks, b, h, g);
        MatrixMap<T> W(weights.empty() ? nullptr : weights.data() + (average ? b : slice) * L * Sx,
                       L, Sx);  // [L, Sx] this slice's weights, or its batch's sum
        if (c.blocked) {
            ops::blocked_attention_forward<T>(a.q(b, h), a.k(b, kv), a.v(b, kv), mask, c.scale,
                                              c.dropout, stream, c.tiles, a.tile_scratch(thread),
                                              a.lse(b, h), a.ctx(b, h));
            if (masks.need_weights) {
                if (!average) W.setZero();
                ops::blocked_attention_weights<T>(a.q(b, h), a.k(b, kv), mask, c.scale, c.dropout,
                                                  stream, a.lse(b, h), c.tiles,
                                                  a.tile_scratch(thread), T(1), W);
            }
        } else {
            ops::attention_forward<T>(a.q(b, h), a.k(b, kv), a.v(b, kv), mask, c.scale, c.dropout,
                                      stream, a.p(b, h, thread), a.dropped(b, h, thread),
                                      a.ctx(b, h));
            if (average) {
                W += a.dropped(b, h, thread);
            } else if (masks.need_weights) {
                W = a.dropped(b, h, thread);
            }
        }
    };
    if (average) {
        detail::parallel_for(B, [&](Index b, int thread) {
            for (Index h = 0; h < H; ++h) attend(b, h, thread);
        });
        weights.matrix() /= static_cast<T>(H);  // the mean over heads, [B, L, Sx]
    } else {
        detail::parallel_for(
            B * H, [&](Index slice, int thread) { attend(slice / H, slice % H, thread); });
    }

    // ---- 4. output = ctx W_o^T + b_o -----------------------------------------------------------
    AttentionForward<T> result;
    result.output = Tensor<T>::uninitialized(query.shape());  // [B, L, E], written in full
    ops::linear_forward<T>(a.ctx(), w_out_.matrix(), options_.bias ? b_out_.data() : nullptr,
                           result.output.view().reshape(Shape{B * L, layout_.E}).matrix());
    if (masks.need_weights) {
        if (!c.batched) weights = std::move(weights).reshape(weights.shape().drop_front());
        result.attn_weights = std::move(weights);
    }
    result.saved = std::move(saved);
    return result;
}

template <class T>
AttentionGradients<T> MultiheadAttention<T>::backward(const AttentionForward<T>& fwd,
                                                      TensorView<const T> grad_output,
                                                      const AttentionBackwardOptions& options) {
    using detail::kKey;
    using detail::kQuery;
    using detail::kValue;
    constexpr const char* fn = "headwise::MultiheadAttention::backward";
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: holds nothing to differentiate (forward ran in eval "
                                    "mode); call train() before forward");
    detail::AttentionActivations<T>& a = *fwd.saved->activations;  // forward's activations
    const detail::AttentionCall<T>& c = a.call;
    check_same_options(c);  // first: a forward of another module has other shapes too
    detail::check_shape(fn, "grad_output", grad_output.shape(), c.shape_of[kQuery]);
    const detail::AttentionGeometry& g = c.g();
    const Index B = g.B, L = g.L, S = g.S, H = layout_.H, D = layout_.D;
    const Index Hkv = layout_.kv_heads, G = layout_.group();
    detail::AttentionActivations<T>& d = gradients_;  // their gradients, same accessors
    d.size_backward(c, detail::max_threads());

    // ---- 4. output = ctx W_o^T + b_o  ->  dctx = dout W_o, dW_o += dout^T ctx, db_o += sum dout
    const MatrixMap<const T> dout = grad_output.reshape(Shape{B * L, layout_.E}).matrix();
    ops::linear_backward<T>(a.ctx(), w_out_.matrix(), dout, d.ctx(), gw_out_.matrix(),
                            options_.bias ? gb_out_.data() : nullptr);

    // ---- 3. attention per (batch, head), in reverse: dQ_bh, dK_bh, dV_bh from dO_bh ------------
    // Blocked: the probabilities recomputed tile by tile from LSE_bh, with forward's masks and
    // O_bh = ctx_bh; materialised: from the saved P_bh. The G query heads of a group add into
    // their key/value head's dK, dV: one task per (batch, key/value head) walks its group's heads
    // in turn, so no two threads add into one.
    detail::parallel_for(B * Hkv, [&](Index task, int thread) {
        const Index b = task / Hkv, kv = task % Hkv;
        for (Index h = kv * G; h < (kv + 1) * G; ++h) {
            const auto stream = static_cast<std::uint64_t>(b * H + h);  // forward's dropout stream
            if (c.blocked) {
                ops::blocked_attention_backward<T>(
                    a.q(b, h), a.k(b, kv), a.v(b, kv), a.ctx(b, h), a.lse(b, h),
                    score_mask(c.masks, b, h, g), c.scale, c.dropout, stream, c.tiles, d.ctx(b, h),
                    d.tile_scratch(thread), d.q(b, h), d.k(b, kv), d.v(b, kv));
            } else {
                ops::attention_backward<T>(a.q(b, h), a.k(b, kv), a.v(b, kv), a.p(b, h, thread),
                                           c.scale, c.dropout, stream, d.ctx(b, h),
                                           d.p(b, h, thread), d.q(b, h), d.k(b, kv), d.v(b, kv));
            }
        }
    });

    // ---- 2. appended keys: projected rows pass their gradient on; bias_k, bias_v collect theirs;
    // the zero row has no parameter
    if (a.appended())
        for (Index b = 0; b < B; ++b)
            for (Index h = 0; h < Hkv; ++h) {                 // key/value heads
                d.k_projected(b, h) += d.k(b, h).topRows(S);  // [S, D]
                d.v_projected(b, h) += d.v(b, h).topRows(S);  // [S, D]
                if (c.bias_kv) {
                    MatrixMap<T>(gbias_k_.data() + h * D, 1, D) += d.k(b, h).row(S);
                    MatrixMap<T>(gbias_v_.data() + h * D, 1, D) += d.v(b, h).row(S);
                }
            }

    // ---- 1. in-projection, in reverse: dW += dY^T X and db += sum dY per GEMM; dX per segment,
    // for the arguments asked for only. A self-attention gradient asked for once gathers every
    // segment into one tensor, and segments side by side in one GEMM's output become one product
    // (dX = dY [B L, 3E] W [3E, E] when fused) instead of three that each pass over dX.
    const bool once = options.combine_self && c.plan.key.self;
    const bool asked[3] = {once || options.query, once || options.key, once || options.value};
    auto into = [&](int input) { return once ? static_cast<int>(kQuery) : input; };
    Tensor<T> dx[3];  // [B N_i, in_i]; with `once`, dx[kQuery] gathers all three
    for (int i : {kQuery, kKey, kValue})
        if (asked[i] && into(i) == i) dx[i] = Tensor<T>(a.x(i).shape());
    for (const detail::ProjectionGemm& gm : c.plan.gemms) {
        const StridedMatrixMap<T> dY = d.y(gm);  // [B N, w_rows]
        ops::linear_backward_weight<T>(dY, a.x(gm.input).matrix(),
                                       MatrixMap<T>(gw_in_.data() + gm.w_offset, gm.w_rows, gm.in));
        if (options_.bias) ops::linear_backward_bias<T>(dY, gb_in_.data() + gm.b_offset);
        for (std::size_t s = 0; s < gm.segments.size();) {
            const detail::Segment& first = gm.segments[s];
            Index rows = first.rows;
            std::size_t next = s + 1;
            while (next < gm.segments.size() && gm.segments[next].rows > 0 &&
                   into(gm.segments[next].input) == into(first.input) &&
                   gm.segments[next].row0 == first.row0 + rows)
                rows += gm.segments[next++].rows;
            if (rows > 0 && asked[first.input])
                ops::linear_backward_input<T>(dY.middleCols(first.row0, rows),
                                              in_weight(gm).middleRows(first.row0, rows),
                                              dx[into(first.input)].matrix());
            s = next;
        }
    }
    AttentionGradients<T> grads;
    if (once) {
        grads.input = std::move(dx[kQuery]).reshape(c.shape_of[kQuery]);
        return grads;
    }
    if (asked[kQuery]) grads.query = std::move(dx[kQuery]).reshape(c.shape_of[kQuery]);
    if (asked[kKey]) grads.key = std::move(dx[kKey]).reshape(c.shape_of[kKey]);
    if (asked[kValue]) grads.value = std::move(dx[kValue]).reshape(c.shape_of[kValue]);
    return grads;
}

template <class T>
template <class Self, class Visit>
void MultiheadAttention<T>::visit_parameters(Self& m, Visit&& visit) {
    const detail::InProjLayout& w = m.layout_;
    if (w.packed()) {
        const Shape packed{w.packed_rows(), w.E};
        visit("in_proj_weight", m.w_in_.view().reshape(packed), m.gw_in_.view().reshape(packed));
    } else {
        const char* names[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
        for (int i : {detail::kQuery, detail::kKey, detail::kValue})
            visit(names[i], view(m.w_in_.data() + w.weight_offset(i), w.weight_shape(i)),
                  view(m.gw_in_.data() + w.weight_offset(i), w.weight_shape(i)));
    }
    if (m.options_.bias) visit("in_proj_bias", m.b_in_.view(), m.gb_in_.view());
    if (m.options_.add_bias_kv) {
        visit("bias_k", m.bias_k_.view(), m.gbias_k_.view());
        visit("bias_v", m.bias_v_.view(), m.gbias_v_.view());
    }
    visit("out_proj.weight", m.w_out_.view(), m.gw_out_.view());
    if (m.options_.bias) visit("out_proj.bias", m.b_out_.view(), m.gb_out_.view());
}

namespace detail {
inline void check_head_index(Index i, Index H) {
    if (i < 0 || i >= H)
        throw_invalid_argument("headwise::MultiheadAttention::head", "i",
                               "must be in [0, " + std::to_string(H) + ")", std::to_string(i));
}
}  // namespace detail

template <class T>
HeadParameters<T> MultiheadAttention<T>::head(Index i) {
    detail::check_head_index(i, layout_.H);
    return HeadParameters<T>(w_in_.data(), options_.bias ? b_in_.data() : nullptr, gw_in_.data(),
                             options_.bias ? gb_in_.data() : nullptr, layout_, i);
}

template <class T>
HeadParameters<const T> MultiheadAttention<T>::head(Index i) const {
    detail::check_head_index(i, layout_.H);
    return HeadParameters<const T>(w_in_.data(), options_.bias ? b_in_.data() : nullptr,
                                   gw_in_.data(), options_.bias ? gb_in_.data() : nullptr, layout_,
                                   i);
}

template <class T>
KVCache<T> MultiheadAttention<T>::make_kv_cache(Index batch, Index capacity) const {
    constexpr const char* fn = "headwise::MultiheadAttention::make_kv_cache";
    if (batch <= 0) throw_invalid_argument(fn, "batch", "must be positive", std::to_string(batch));
    if (capacity <= 0)
        throw_invalid_argument(fn, "capacity", "must be positive", std::to_string(capacity));
    const detail::InProjLayout& w = layout_;
    if (w.kdim != w.E || w.vdim != w.E)
        throw std::invalid_argument(
            std::string(fn) +
            ": options.kdim, options.vdim: decode is self-attention and needs kdim == vdim == "
            "embed_dim = " +
            std::to_string(w.E) + ", got kdim " + std::to_string(w.kdim) + ", vdim " +
            std::to_string(w.vdim));
    return KVCache<T>(batch, capacity, w.E, w.kv_heads, w.D);
}

template <class T>
Tensor<T> MultiheadAttention<T>::decode(TensorView<const T> x_new, KVCache<T>& cache,
                                        TensorView<const bool> key_padding) {
    Tensor<T> y = Tensor<T>::uninitialized(x_new.shape());  // written in full by decode_into
    decode_into(x_new, cache, y, key_padding);
    return y;
}

template <class T>
void MultiheadAttention<T>::decode_into(TensorView<const T> x_new, KVCache<T>& cache,
                                        TensorView<T> out, TensorView<const bool> key_padding) {
    constexpr const char* fn = "headwise::MultiheadAttention::decode";
    const detail::InProjLayout& w = layout_;
    const Index E = w.E, D = w.D, Hkv = w.kv_heads, G = w.group();
    const Index KV = Hkv * D, QKV = w.packed_rows();  // E + 2 Hkv D

    // ---- checks, all before anything changes ---------------------------------------------------
    if (this->training_)
        throw std::invalid_argument(std::string(fn) +
                                    ": the module is in training mode; decode runs in eval mode, "
                                    "call eval() first");
    if (cache.capacity_ == 0 || cache.E_ != E || cache.Hkv_ != Hkv || cache.D_ != D)
        throw std::invalid_argument(
            std::string(fn) + ": cache: made for embed_dim " + std::to_string(cache.E_) + " with " +
            std::to_string(cache.Hkv_) + " key/value heads of " + std::to_string(cache.D_) +
            " features (capacity " + std::to_string(cache.capacity_) +
            "); this module needs embed_dim " + std::to_string(E) + " with " + std::to_string(Hkv) +
            " of " + std::to_string(D) + ": make it with this module's make_kv_cache");
    const Index B = cache.B_;
    const bool batched = x_new.rank() == 3;
    if (!(batched || (x_new.rank() == 2 && B == 1)) || x_new.shape().back() != E ||
        (batched && x_new.size(0) != B) || x_new.size(-2) < 1) {
        const std::string e = std::to_string(E);
        throw shape_error(fn, "x_new",
                          B == 1 ? "[1, T, " + e + "] or [T, " + e + "]"
                                 : "[" + std::to_string(B) + ", T, " + e + "]",
                          x_new.shape());
    }
    const Index T_ = x_new.size(-2);  // new tokens
    detail::check_shape(fn, "out", out.shape(), x_new.shape());
    const bool padded = key_padding.data() != nullptr;
    if (padded)
        detail::check_shape(fn, "key_padding", key_padding.shape(),
                            batched ? Shape{B, T_} : Shape{T_});
    const Index n = cache.size_, N = n + T_;  // tokens before and after this call
    if (N > cache.capacity_)
        throw std::invalid_argument(std::string(fn) + ": x_new: " + std::to_string(T_) +
                                    " new tokens do not fit the cache, which holds " +
                                    std::to_string(n) + " of capacity " +
                                    std::to_string(cache.capacity_));

    // ---- scratch: sized by the first call, grown only for a larger chunk ----------------------
    const bool bias_kv = options_.add_bias_kv, zero_attn = options_.add_zero_attn;
    const Index extra = (bias_kv ? 1 : 0) + (zero_attn ? 1 : 0);  // keys appended after the cache
    const Index Sx = N + extra;
    const Index R = T_ == 1 ? G : T_;  // query rows per attention call (see step 3)
    const int threads = detail::max_threads();
    MatrixMap<T> Y(cache.qkv_.get(Shape{B * T_, QKV}).data(), B * T_, QKV);  // [B T, E + 2 KV]
    MatrixMap<T> ctx(cache.ctx_.get(Shape{B * T_, E}).data(), B * T_, E);    // [B T, E]
    T* p = cache.p_.get(Shape{threads, R, cache.capacity_ + extra}).data();  // [threads, R, Sx]
    T* kx = extra ? cache.kx_.get(Shape{threads, cache.capacity_ + extra, D}).data() : nullptr;
    T* vx = extra ? cache.vx_.get(Shape{threads, cache.capacity_ + extra, D}).data() : nullptr;

    // ---- 1. project the new tokens only: [Q | K | V] = X W_in^T + b_in, [B T, E + 2 Hkv D] ----
    // Every projection writes the same columns: column r of Y is row r of the packed weight.
    const MatrixMap<const T> X = x_new.reshape(Shape{B * T_, E}).matrix();  // [B T, E]
    const T* b_in = options_.bias ? b_in_.data() : nullptr;
    auto gemm = [&](Index row0, Index rows) {  // Y[:, row0 : row0 + rows] from W_in's rows
        ops::linear_forward<T>(X, MatrixMap<const T>(w_in_.data() + row0 * E, rows, E),
                               b_in ? b_in + row0 : nullptr, Y.middleCols(row0, rows));
    };
    using detail::kKey;
    using detail::kQuery;
    using detail::kValue;
    if (options_.projection == Projection::fused) {
        gemm(0, QKV);
    } else if (options_.projection == Projection::separate) {
        for (int i : {kQuery, kKey, kValue}) gemm(w.bias_offset(i), w.rows(i));
    } else {
        for (int i : {kQuery, kKey, kValue})
            for (Index h = 0; h < w.heads(i); ++h) gemm(w.bias_offset(i, h), D);
    }

    // ---- 2. append the new keys and values (and padding flags) to the cache --------------------
    for (Index b = 0; b < B; ++b) {
        for (Index g = 0; g < Hkv; ++g) {
            cache.k(b, g).middleRows(n, T_) = Y.block(b * T_, E + g * D, T_, D);
            cache.v(b, g).middleRows(n, T_) = Y.block(b * T_, E + KV + g * D, T_, D);
        }
        for (Index t = 0; t < T_; ++t) {
            const bool pad = padded && key_padding.data()[b * T_ + t];
            cache.padding_.data()[b * cache.capacity_ + n + t] = pad;
            cache.any_padding_ = cache.any_padding_ || pad;
        }
    }

    // ---- 3. attention over the cache, per (batch, key/value head) ------------------------------
    // One new token: the G query heads of a group are one [G, D] block of Y's row (adjacent
    // heads), so they attend the group's keys together, in one product that reads the keys once.
    // A chunk of T tokens: each head's [T, D] queries with the bottom-right causal rule (new
    // token t sees keys j <= n + t). Appended keys (bias_k, zero) follow the cached ones.
    const T scale = detail::attention_scale<T>(options_);
    detail::parallel_for(B * Hkv, [&](Index slice, int thread) {
        const Index b = slice / Hkv, g = slice % Hkv;
        const T* k = cache.k(b, g).data();  // the cached [N, D] keys
        const T* v = cache.v(b, g).data();  // and values
        if (extra) {  // [N + extra, D]: a copy, then bias_k / bias_v, then the zero key
            MatrixMap<T> Kx(kx + thread * (cache.capacity_ + extra) * D, Sx, D);
            MatrixMap<T> Vx(vx + thread * (cache.capacity_ + extra) * D, Sx, D);
            Kx.topRows(N) = MatrixMap<const T>(k, N, D);
            Vx.topRows(N) = MatrixMap<const T>(v, N, D);
            if (bias_kv) {
                Kx.row(N) = MatrixMap<const T>(bias_k_.data() + g * D, 1, D);
                Vx.row(N) = MatrixMap<const T>(bias_v_.data() + g * D, 1, D);
            }
            if (zero_attn) {
                Kx.row(Sx - 1).setZero();
                Vx.row(Sx - 1).setZero();
            }
            k = Kx.data();
            v = Vx.data();
        }
        const MatrixMap<const T> K(k, Sx, D);  // [Sx, D]
        const MatrixMap<const T> V(v, Sx, D);  // [Sx, D]
        ops::ScoreMask<T> mask;
        if (cache.any_padding_) mask.key_padding = cache.padding_.data() + b * cache.capacity_;
        mask.masked_keys = N;
        T* P = p + thread * R * (cache.capacity_ + extra);
        if (T_ == 1) {
            const Index col = g * G * D;  // the group's query heads, [G, D]
            ops::cached_attention_forward<T>(MatrixMap<const T>(Y.data() + b * QKV + col, G, D), K,
                                             V, mask, scale, MatrixMap<T>(P, G, Sx),
                                             MatrixMap<T>(ctx.data() + b * E + col, G, D));
        } else {
            mask.causal = true;
            mask.causal_offset = ops::causal_offset(CausalAlignment::bottom_right, T_, N);
            for (Index h = g * G; h < (g + 1) * G; ++h)
                ops::cached_attention_forward<T>(Y.block(b * T_, h * D, T_, D), K, V, mask, scale,
                                                 MatrixMap<T>(P, T_, Sx),
                                                 ctx.block(b * T_, h * D, T_, D));
        }
    });

    // ---- 4. y = ctx W_o^T + b_o; the cache now holds the new tokens ----------------------------
    ops::linear_forward<T>(ctx, w_out_.matrix(), options_.bias ? b_out_.data() : nullptr,
                           out.reshape(Shape{B * T_, E}).matrix());
    cache.size_ = N;
}

}  // namespace headwise
