// SPDX-License-Identifier: MIT
// MultiheadAttention<T>: torch.nn.MultiheadAttention's parameters, forward and backward, with the
// Q/K/V projections computed fused, separately or per head.
#pragma once

#include <Eigen/Core>

#include <algorithm>    // std::copy_n
#include <cmath>        // std::sqrt
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <memory>       // std::shared_ptr
#include <stdexcept>    // std::invalid_argument, std::logic_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_const_v, std::is_same_v
#include <utility>      // std::move, std::swap
#include <vector>       // std::vector

#include "../../bf16.hpp"
#include "../../config.hpp"
#include "../../detail/compiled_templates.hpp"
#include "../../detail/parallel.hpp"
#include "../../detail/precision_check.hpp"
#include "../../error.hpp"
#include "../../init.hpp"
#include "../../ops/dropout.hpp"
#include "../../ops/gemm_bf16.hpp"
#include "../../precision.hpp"
#include "../../random.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "../module.hpp"
#include "../uninitialized.hpp"
#include "../weight_matrix.hpp"
#include "detail/attention_buffers.hpp"
#include "detail/attention_call.hpp"
#include "detail/attention_checks.hpp"
#include "detail/attention_options.hpp"
#include "detail/attention_pipeline.hpp"
#include "detail/in_proj_layout.hpp"
#include "detail/projection_plan.hpp"
#include "head_parameters.hpp"
#include "kv_cache.hpp"
#include "options.hpp"

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

/// Multi-head attention (Vaswani et al. 2017, Section 3.2.2) with torch.nn.MultiheadAttention's
/// parameters, names, initialisation and semantics (batch_first = true):
///   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),  output = Concat(head_1..head_H) W^O + b^O.
/// The projection (fused, separate, per_head) changes how Q, K, V are computed, never the result.
/// forward, backward and decode run the same steps (detail/attention_pipeline.hpp): 1. project
/// (1b. rotate Q and K when options.rotary is enabled), 2. append the extra keys, 3. attend,
/// 4. project out; backward walks them in reverse, decode projects the new tokens only and
/// attends over the cache.
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
    /// Validates `options` and allocates the parameters without drawing them
    /// (headwise::uninitialized): the projection weights are left unwritten (no page of them is
    /// touched until a loader writes it), in_proj_bias, out_proj.bias, bias_k and bias_v are
    /// zero, and every gradient is allocated on first use (backward, zero_grad, parameters(),
    /// grad_dict()). For a module whose weights are loaded next; the dropout stream is seed 0's.
    /// A new module is in training mode.
    MultiheadAttention(const Options& options, uninitialized_t);

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

    /// Exchanges the scratch that eval-mode forwards reuse (projections, context, attention
    /// tiles) with `other`'s. Modules run one after another (a stack of layers) can pass one set
    /// of buffers along instead of each keeping its own: results do not change (every call
    /// writes the scratch before reading it). Training-mode activations, saved for backward,
    /// are not affected. Neither module may be running a call.
    void swap_eval_buffers(MultiheadAttention& other) noexcept {
        std::swap(eval_activations_, other.eval_activations_);
    }

    /// with_precision (Module; float modules): the in- and out-projections multiplied in bf16
    /// with float accumulation (inputs and weights rounded to bf16); biases, scores, softmax,
    /// the attention products (Q K^T, P V), dropout and outputs stay float. Training is mixed
    /// precision: each training forward rounds the current float weights into the bf16 copies,
    /// which its backward reads (dY, the weight and the saved float input rounded, products
    /// accumulated in float into the float gradients); bias gradients and the attention step's
    /// backward are float. The projections' buffers are each call's own, so that one bf16 module
    /// may decode several caches at once, as in float. Released (FloatWeights::release: the
    /// float in-projection weights, in_proj_weight or q/k/v_proj_weight, and out_proj.weight
    /// freed with their gradients; the biases, bias_k and bias_v stay float): forward (either
    /// mode), decode, decode_into, make_kv_cache, with_projection, swap_eval_buffers, train()
    /// and eval() work with the results of keep, bit for bit; backward, head() and the parameter
    /// walks (parameters(), state_dict(), ... naming
    /// "headwise::MultiheadAttention::visit_parameters") throw std::logic_error. Memory, with
    /// W = (H D + 2 Hkv D) E + E H D projection weights and b the other parameters: float 4 (W +
    /// b), bf16 keep 6 W + 4 b, bf16 release 2 W + 4 b.

    /// The kernel a call of L queries over S keys (before the appended bias_k and zero-attention
    /// keys) runs: options().attention_kernel when it forces one, else the automatic choice.
    AttentionKernel kernel_for(Index L, Index S, bool need_weights) const noexcept;
    const Options& options() const noexcept { return options_; }
    Index embed_dim() const noexcept { return layout_.E; }
    Index num_heads() const noexcept { return layout_.H; }
    /// Key/value heads Hkv: num_heads for multi-head attention, fewer for grouped-query.
    Index num_kv_heads() const noexcept { return layout_.kv_heads; }
    /// Features per head D: options.head_dim, or embed_dim / num_heads when it is 0.
    Index head_dim() const noexcept { return layout_.D; }
    /// The inner width H D: features of the concatenated heads (out_proj.weight is [E, H D]);
    /// embed_dim unless options.head_dim says otherwise.
    Index inner_dim() const noexcept { return layout_.inner(); }
    Index kdim() const noexcept { return layout_.kdim; }
    Index vdim() const noexcept { return layout_.vdim; }

    /// Removes the query heads `heads` (indices in [0, num_heads), in any order; a repeated one
    /// counts once) from the parameters, as Hugging Face's prune_heads: their rows of the query
    /// projection and of in_proj_bias, their D columns of out_proj.weight, and every key/value
    /// head that no remaining query head reads (its rows of the key and value projections and
    /// its slices of bias_k, bias_v). With grouped-query attention a key/value head goes only
    /// with its whole group, and the groups that remain must keep equally many query heads.
    /// The gradients are cut alike. Afterwards num_heads() and num_kv_heads() count what is
    /// left, options().head_dim is D, and the state dict has the same names with smaller
    /// shapes; forward, backward (every remaining gradient) and decode give what the module
    /// gave before with head_mask 0 on the removed heads. Remaining heads keep their order and
    /// are numbered from 0 again. Views from parameters() or head(), caches from
    /// make_kv_cache() and training forwards taken before belong to the old shapes (backward
    /// refuses such a forward, decode such a cache). Throws std::invalid_argument for an index
    /// outside [0, num_heads), for removing every head, or for groups left unequal;
    /// std::logic_error unless the weights are float32 (not bf16, not a stored type); all
    /// before anything changes. An empty list changes nothing.
    MultiheadAttention& prune_heads(const std::vector<Index>& heads);

    /// Head i's in-projection matrices and biases, as views: writable on a non-const module.
    /// Throws std::logic_error when the float weights are released (see with_precision).
    HeadParameters<T> head(Index i);
    HeadParameters<const T> head(Index i) const;

    /// A cache for decode(): room for the keys and values of `capacity` tokens of `batch`
    /// sequences, per key/value head ([B, Hkv, capacity, D] each). decode is self-attention, so
    /// the module needs kdim == vdim == embed_dim. `precision` Precision::bf16 stores the keys
    /// and values in bf16, half the memory (float modules only; see KVCache); it is independent
    /// of the module's own precision.
    KVCache<T> make_kv_cache(Index batch, Index capacity,
                             Precision precision = Precision::float32) const;

    /// Incremental decoding: causal self-attention of new tokens x_new [B, T, E] (or [T, E] with
    /// a batch-1 cache) over the cached tokens and themselves, in eval mode. Projects x_new only,
    /// appends its keys and values to the cache, and returns y [B, T, E], where new token t
    /// attends every cached token and the new tokens up to itself (bottom-right causal), then the
    /// bias_k and zero-attention keys when the module has them. Feeding a sequence in chunks of
    /// any sizes gives the outputs of one forward(x, x, x) with is_causal in eval mode.
    /// `key_padding` [B, T] ([T]), true = padding, marks new tokens that no token may attend (see
    /// KVCache). With options.rotary, new token t of sequence b is rotated at position
    /// cache.position(b) plus the non-padding new tokens before it, and its key enters the cache
    /// rotated: padding shifts no real token's position, so a left-padded sequence decodes as it
    /// would alone. Everything is checked first (training mode, shapes, the cache's dimensions,
    /// room for T tokens); on an error the cache is unchanged.
    /// `head_mask` [H] or [B, H] gates each head's output as AttentionMasks::head_mask does.
    Tensor<T> decode(TensorView<const T> x_new, KVCache<T>& cache,
                     TensorView<const bool> key_padding = {}, TensorView<const T> head_mask = {});
    /// decode() writing into `out` (x_new's shape): allocates nothing once the cache's scratch
    /// has been sized by a first call with as many new tokens.
    void decode_into(TensorView<const T> x_new, KVCache<T>& cache, TensorView<T> out,
                     TensorView<const bool> key_padding = {}, TensorView<const T> head_mask = {});

    /// Its generator (the dropout key of each training forward), then every parameter under
    /// torch.nn.MultiheadAttention.state_dict() names and shapes, in its order (the module
    /// contract).
    template <class D>
    void declare(D& d);

private:
    detail::AttentionCall<T> check_forward(TensorView<const T> query, TensorView<const T> key,
                                           TensorView<const T> value,
                                           const AttentionMasks<T>& masks) const;
    void check_same_options(const detail::ForwardActivations<T>& acts) const;
    void check_head_index(Index i) const {
        if (i < 0 || i >= layout_.H)
            throw_invalid_argument("headwise::MultiheadAttention::head", "i",
                                   "must be in [0, " + std::to_string(layout_.H) + ")",
                                   std::to_string(i));
    }
    void prepare(detail::ForwardActivations<T>& acts, const detail::AttentionCall<T>& call,
                 TensorView<const T> query, TensorView<const T> key, TensorView<const T> value,
                 const AttentionMasks<T>& masks);
    /// The parameters (or, from a non-const module, their gradients) as the pipeline reads them.
    detail::AttentionParameters<const T> parameter_view() const {
        return pointers_of<const T>(w_in_.value(), b_in_, w_out_.value(), b_out_, bias_k_, bias_v_);
    }
    detail::AttentionParameters<T> gradient_view() {
        allocate_bias_grads();
        return pointers_of<T>(w_in_.grad(), gb_in_, w_out_.grad(), gb_out_, gbias_k_, gbias_v_);
    }
    /// A module constructed uninitialized allocates its bias gradients on first use (zero).
    void allocate_bias_grads() {
        for (auto [value, grad] : {std::pair{&b_in_, &gb_in_}, std::pair{&b_out_, &gb_out_},
                                   std::pair{&bias_k_, &gbias_k_}, std::pair{&bias_v_, &gbias_v_}})
            if (grad->shape() != value->shape()) *grad = Tensor<T>(value->shape());
    }
    template <class P, class Tensors>
    detail::AttentionParameters<P> pointers_of(Tensors& w_in, Tensors& b_in, Tensors& w_out,
                                               Tensors& b_out, Tensors& bias_k,
                                               Tensors& bias_v) const {
        // Precision::bf16: the products read the copies (WeightMatrix::bf16(), else null).
        detail::AttentionParameters<P> p;
        p.layout = layout_;
        p.w_in = w_in.data();
        p.w_out = w_out.data();
        p.b_in = options_.bias ? b_in.data() : nullptr;
        p.b_out = options_.bias ? b_out.data() : nullptr;
        p.bias_k = options_.add_bias_kv ? bias_k.data() : nullptr;
        p.bias_v = options_.add_bias_kv ? bias_v.data() : nullptr;
        p.zero_attn = options_.add_zero_attn;
        if (std::is_const_v<P>) {
            p.in_holder = &w_in_;
            p.out_holder = &w_out_;
            p.w_in_bf16 = w_in_.bf16();
            p.w_out_bf16 = w_out_.bf16();
        }
        return p;
    }

    Options options_;
    detail::InProjLayout layout_;  // where Wq, Wk, Wv and the heads sit in w_in_, b_in_
    Generator rng_;
    // The projection weights with their gradients and copies: w_in_ one block [weight_size]
    // (in_proj_weight, or q/k/v_proj_weight one after the other), w_out_ [E, H D].
    WeightMatrix<T> w_in_, w_out_;
    Tensor<T> b_in_, b_out_, bias_k_, bias_v_;
    Tensor<T> gb_in_, gb_out_, gbias_k_, gbias_v_;
    /// Throws std::logic_error naming `function` when the float weights are released.
    void check_weights(const char* function) const {
        detail::check_float_weights(
            function, w_in_.released(),
            "this call needs the float projection weights (the module is inference-only)");
    }

    // Buffers reused by every call: an eval-mode forward's activations, backward's gradients of
    // them, and the spare training activations a finished call hands back. Hence one module must
    // not run two calls at the same time; copies of it may (a copy starts with buffers of its own).
    detail::ForwardActivations<T> eval_activations_;
    detail::ActivationGradients<T> gradients_;
    detail::ActivationPool<T> pool_;
};

// ================================================================================================

template <class T>
MultiheadAttention<T>::MultiheadAttention(const Options& options, std::uint64_t seed)
    : options_(options), rng_(seed) {
    constexpr const char* fn = "headwise::MultiheadAttention::MultiheadAttention";
    detail::check_options<T>(fn, options);
    layout_ = detail::make_in_proj_layout<T>(fn, options);
    const detail::InProjLayout& layout = layout_;
    w_in_ = WeightMatrix<T>(Shape{layout.weight_size()});
    // Rows of E values, unless kdim or vdim differ (then the blocks' rows differ in length).
    w_in_.set_row_length(layout.kdim == layout.E && layout.vdim == layout.E ? layout.E : 0);
    if (layout.packed()) {
        // torch: xavier_uniform_(in_proj_weight) on the whole [3E, E] matrix ([H D + 2 Hkv D,
        // E]), as a Linear(E, H D + 2 Hkv D) would be.
        xavier_uniform_(w_in_.value().view().reshape(Shape{layout.packed_rows(), layout.E}), rng_);
    } else {
        // torch: xavier_uniform_ on q_proj_weight, k_proj_weight, v_proj_weight in turn.
        for (int i : {detail::kQuery, detail::kKey, detail::kValue})
            xavier_uniform_(
                view(w_in_.value().data() + layout.weight_offset(i), layout.weight_shape(i)), rng_);
    }
    w_out_ = WeightMatrix<T>(Shape{layout.E, layout.inner()});  // [E, H D]
    kaiming_uniform_(w_out_.value().view(), std::sqrt(5.0), rng_);
    if (options.bias) {  // torch: constant_(in_proj_bias, 0), constant_(out_proj.bias, 0)
        b_in_ = Tensor<T>(Shape{layout.bias_size()});
        gb_in_ = Tensor<T>(b_in_.shape());
        b_out_ = Tensor<T>(Shape{layout.E});
        gb_out_ = Tensor<T>(b_out_.shape());
    }
    if (options.add_bias_kv) {
        // torch: xavier_normal_ on [1, 1, E]: std = sqrt(2 / (E + E)). With Hkv key/value heads
        // they are [1, 1, Hkv D], one slice per key/value head, and std = sqrt(1 / (Hkv D)).
        const Index kv = layout.rows(detail::kKey);
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
MultiheadAttention<T>::MultiheadAttention(const Options& options, uninitialized_t)
    : options_(options), rng_(0) {
    constexpr const char* fn = "headwise::MultiheadAttention::MultiheadAttention";
    detail::check_options<T>(fn, options);
    layout_ = detail::make_in_proj_layout<T>(fn, options);
    const detail::InProjLayout& layout = layout_;
    w_in_ = WeightMatrix<T>::uninitialized(Shape{layout.weight_size()});
    w_in_.set_row_length(layout.kdim == layout.E && layout.vdim == layout.E ? layout.E : 0);
    w_out_ = WeightMatrix<T>::uninitialized(Shape{layout.E, layout.inner()});  // [E, H D]
    // The biases zero, as PyTorch initialises them: a loader may fill only some (a Llama
    // checkpoint with q/k/v biases and no o_proj bias leaves out_proj.bias zero).
    if (options.bias) {
        b_in_ = Tensor<T>(Shape{layout.bias_size()});
        b_out_ = Tensor<T>(Shape{layout.E});
    }
    if (options.add_bias_kv) {
        bias_k_ = Tensor<T>(Shape{1, 1, layout.rows(detail::kKey)});
        bias_v_ = Tensor<T>(bias_k_.shape());
    }
}

template <class T>
detail::AttentionCall<T> MultiheadAttention<T>::check_forward(
    TensorView<const T> query, TensorView<const T> key, TensorView<const T> value,
    const AttentionMasks<T>& masks) const {
    const detail::CallSizes sizes =
        detail::check_forward_arguments(layout_, query, key, value, masks);
    return detail::describe_call<T>(options_, sizes.B, sizes.L, sizes.S, masks.need_weights,
                                    detail::CallKind::forward);
}

template <class T>
void MultiheadAttention<T>::check_same_options(const detail::ForwardActivations<T>& acts) const {
    // Every option that fixes what forward computed and saved; each mismatch named with both
    // values. Equal options give equal layouts, so backward walks forward's buffers in bounds.
    const std::string other = detail::differing_options<T>(options_, acts.options);
    if (!other.empty())
        throw std::invalid_argument(
            "headwise::MultiheadAttention::backward: fwd: comes from a "
            "module with other options (" +
            other + ")");
    HEADWISE_ASSERT(acts.projection.plan().key.layout == layout_);
}

template <class T>
void MultiheadAttention<T>::prepare(detail::ForwardActivations<T>& acts,
                                    const detail::AttentionCall<T>& call, TensorView<const T> query,
                                    TensorView<const T> key, TensorView<const T> value,
                                    const AttentionMasks<T>& masks) {
    using detail::kKey;
    using detail::kQuery;
    using detail::kValue;
    const bool kv_same = key.data() == value.data() && key.shape() == value.shape();
    const bool self = kv_same && query.data() == key.data() && query.shape() == key.shape();
    acts.projection.plan_for(
        detail::ProjectionKey{options_.projection, layout_, call.geometry, self, kv_same});
    acts.call = call;
    acts.options = options_;
    acts.batched = query.rank() == 3;
    acts.shape_of[kQuery] = query.shape();
    acts.shape_of[kKey] = key.shape();
    acts.shape_of[kValue] = value.shape();
    acts.x_of[kKey] = self ? kQuery : kKey;
    acts.x_of[kValue] = self ? kQuery : (kv_same ? kKey : kValue);
    // A blocked backward applies the masks again: training keeps a copy of them.
    acts.masks = this->training_ && call.blocked() ? masks : AttentionMasks<T>{};
    // P is kept whole [B, H, L, Sx] when backward needs it, else each thread reuses one slice.
    acts.size_forward(!call.blocked() && this->training_, detail::max_threads());
    // Step 3b's gates [B, H]: head_mask broadcast over the batch, or ones when only their
    // gradient is asked for.
    acts.gates.clear();
    acts.gate_grad = {};
    const bool gate_grad = this->training_ && masks.head_mask_grad.data() != nullptr;
    if (!detail::mask_absent(masks.head_mask) || gate_grad) {
        const Index B = call.geometry.B, H = layout_.H;
        const T* xi = detail::mask_absent(masks.head_mask) ? nullptr : masks.head_mask.data();
        const bool per_batch = masks.head_mask.rank() == 2;
        acts.gates.resize(static_cast<std::size_t>(B * H));
        for (Index b = 0; b < B; ++b)
            for (Index h = 0; h < H; ++h)
                acts.gates[static_cast<std::size_t>(b * H + h)] =
                    xi ? xi[per_batch ? b * H + h : h] : T(1);
        if (gate_grad) {
            acts.gate_grad = masks.head_mask_grad;
            acts.gate_grad_batched = masks.head_mask_grad.rank() == 2;
        }
        if (this->training_) acts.size_gated();
    }
    acts.set_inputs({query.reshape(detail::merge_rows(query.shape())),   // [B L, E]
                     key.reshape(detail::merge_rows(key.shape())),       // [B S, kdim]
                     value.reshape(detail::merge_rows(value.shape()))},  // [B S, vdim]
                    this->training_ && !options_.reference_inputs);
}

template <class T>
AttentionKernel MultiheadAttention<T>::kernel_for(Index L, Index S,
                                                  bool need_weights) const noexcept {
    const detail::AttentionCall<T> call =
        detail::describe_call<T>(options_, 1, L, S, need_weights, detail::CallKind::forward);
    return call.blocked() ? AttentionKernel::blocked : AttentionKernel::materialised;
}

template <class T>
AttentionForward<T> MultiheadAttention<T>::forward(TensorView<const T> query,
                                                   TensorView<const T> key,
                                                   TensorView<const T> value,
                                                   const AttentionMasks<T>& masks) {
    detail::AttentionCall<T> call = check_forward(query, key, value, masks);  // throws first
    // Training in bf16: the master weights as they are now into the copies (which backward
    // reads); evaluation reads the copies eval() took. Released: the copies are all there is.
    if (this->training_) {
        w_in_.refresh();
        w_out_.refresh();
    }
    if (this->training_ && options_.dropout > 0.0)
        call.dropout = ops::Dropout{options_.dropout, rng_()};

    // ---- 0. the call's activations: kept for backward in training mode, the module's own in
    // eval mode; every buffer sized once, here.
    std::shared_ptr<detail::AttentionSaved<T>> saved;
    if (this->training_) saved = pool_.make_saved();
    detail::ForwardActivations<T>& acts = saved ? *saved->activations : eval_activations_;
    prepare(acts, call, query, key, value, masks);
    const detail::AttentionParameters<const T> params = parameter_view();

    detail::project<T>(params, acts.inputs(), acts.projection);   // 1. Q, K, V
    if (call.rotary.enabled) detail::rotate<T>(acts, layout_);    // 1b. RoPE(Q), RoPE(K)
    if (acts.appended()) detail::append_keys<T>(params, acts);    // 2. K', V'
    Tensor<T> weights = detail::attend<T>(acts, masks, layout_);  // 3. ctx (and the weights)
    if (acts.gated()) detail::gate_heads<T>(acts, layout_);       // 3b. ctx_bh xi_bh
    AttentionForward<T> result;                                   // 4. ctx W_o^T + b_o
    result.output = Tensor<T>::uninitialized(query.shape());      // [B, L, E], written in full
    const Index BL = call.geometry.B * call.geometry.L;
    detail::project_out<T>(params, acts.out_ctx(),
                           result.output.view().reshape(Shape{BL, layout_.E}).matrix());
    if (masks.need_weights) {
        if (!acts.batched) weights = std::move(weights).reshape(weights.shape().drop_front());
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
    w_in_.check_trainable(fn);
    check_weights(fn);
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: holds nothing to differentiate (forward ran in eval "
                                    "mode); call train() before forward");
    detail::ForwardActivations<T>& acts = *fwd.saved->activations;
    check_same_options(acts);  // first: a forward of another module has other shapes too
    detail::check_shape(fn, "grad_output", grad_output.shape(), acts.shape_of[kQuery]);
    detail::ActivationGradients<T>& grads = gradients_;  // dY, dK', dV', dctx
    grads.size_for(acts, detail::max_threads());
    const detail::AttentionParameters<const T> params = parameter_view();
    const detail::AttentionParameters<T> dparams = gradient_view();

    // Forward's steps in reverse: 4. project out, 3b. the gates, 3. attend, 2. the extra keys,
    // 1b. rotate, 1. project.
    const Index BL = acts.call.geometry.B * acts.call.geometry.L;
    detail::project_out_backward<T>(params, dparams, acts.out_ctx(),
                                    grad_output.reshape(Shape{BL, layout_.E}).matrix(),
                                    grads.ctx());
    if (acts.gated()) detail::gate_heads_backward<T>(acts, grads, layout_);
    detail::attend_backward<T>(acts, grads, layout_);
    if (acts.appended()) detail::append_keys_backward<T>(dparams, grads);
    if (acts.call.rotary.enabled) detail::rotate_backward<T>(acts, grads, layout_);
    // A self-attention gradient asked for once gathers the three inputs' into one tensor.
    detail::InputGradients which;
    which.combined = options.combine_self && acts.projection.plan().key.self;
    which.asked[kQuery] = which.combined || options.query;
    which.asked[kKey] = which.combined || options.key;
    which.asked[kValue] = which.combined || options.value;
    Tensor<T> dx[3];  // [B N_i, in_i]; combined: dx[kQuery] gathers all three
    detail::project_backward<T>(params, dparams, acts.inputs(), grads.projection, which, dx);

    AttentionGradients<T> result;
    if (which.combined) {
        result.input = std::move(dx[kQuery]).reshape(acts.shape_of[kQuery]);
        return result;
    }
    if (which.asked[kQuery]) result.query = std::move(dx[kQuery]).reshape(acts.shape_of[kQuery]);
    if (which.asked[kKey]) result.key = std::move(dx[kKey]).reshape(acts.shape_of[kKey]);
    if (which.asked[kValue]) result.value = std::move(dx[kValue]).reshape(acts.shape_of[kValue]);
    return result;
}

template <class T>
template <class D>
void MultiheadAttention<T>::declare(D& d) {
    d.random(rng_);
    const detail::InProjLayout& layout = layout_;
    if (layout.packed()) {
        d.parameter("in_proj_weight", w_in_, 0, Shape{layout.packed_rows(), layout.E});
    } else {
        const char* names[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
        for (int i : {detail::kQuery, detail::kKey, detail::kValue})
            d.parameter(names[i], w_in_, layout.weight_offset(i), layout.weight_shape(i));
    }
    if (options_.bias) d.parameter("in_proj_bias", b_in_, gb_in_);
    if (options_.add_bias_kv) {
        d.parameter("bias_k", bias_k_, gbias_k_);
        d.parameter("bias_v", bias_v_, gbias_v_);
    }
    d.parameter("out_proj.weight", w_out_);
    if (options_.bias) d.parameter("out_proj.bias", b_out_, gb_out_);
}

template <class T>
MultiheadAttention<T>& MultiheadAttention<T>::prune_heads(const std::vector<Index>& heads) {
    using detail::kKey;
    using detail::kQuery;
    using detail::kValue;
    constexpr const char* fn = "headwise::MultiheadAttention::prune_heads";
    const detail::InProjLayout old = layout_;
    std::vector<bool> removed(static_cast<std::size_t>(old.H), false);
    for (Index h : heads) {
        if (h < 0 || h >= old.H)
            throw_invalid_argument(fn, "heads", "must be in [0, " + std::to_string(old.H) + ")",
                                   std::to_string(h));
        removed[static_cast<std::size_t>(h)] = true;
    }
    // The query heads that stay, and per key/value head how many of its group stay.
    std::vector<Index> kept[3];  // kept[kQuery]: query heads; kept[kKey], kept[kValue]: kv heads
    std::vector<Index> group_left(static_cast<std::size_t>(old.kv_heads), 0);
    for (Index h = 0; h < old.H; ++h)
        if (!removed[static_cast<std::size_t>(h)]) {
            kept[kQuery].push_back(h);
            ++group_left[static_cast<std::size_t>(old.kv_head(h))];
        }
    if (kept[kQuery].empty())
        throw std::invalid_argument(std::string(fn) + ": heads: would remove all " +
                                    std::to_string(old.H) + " heads; at least one must stay");
    if (static_cast<Index>(kept[kQuery].size()) == old.H) return *this;
    Index group = 0;
    for (Index kv = 0; kv < old.kv_heads; ++kv) {
        const Index left = group_left[static_cast<std::size_t>(kv)];
        if (left == 0) continue;
        if (group != 0 && left != group)
            throw std::invalid_argument(
                std::string(fn) +
                ": heads: grouped-query attention needs the key/value heads that remain to keep "
                "equally many query heads (or none), got " +
                std::to_string(group) + " for key/value head " + std::to_string(kept[kKey][0]) +
                " and " + std::to_string(left) + " for key/value head " + std::to_string(kv));
        group = left;
        kept[kKey].push_back(kv);
    }
    kept[kValue] = kept[kKey];
    if (w_in_.released() || w_in_.stored() || this->precision() != Precision::float32)
        throw std::logic_error(std::string(fn) +
                               ": needs the float32 weights (the module computes in bf16 or "
                               "from a stored type); with_precision(Precision::float32) first");

    allocate_bias_grads();  // cut below with the biases
    Options options = options_;
    options.num_heads = static_cast<Index>(kept[kQuery].size());
    if (options.num_kv_heads != 0) options.num_kv_heads = static_cast<Index>(kept[kKey].size());
    options.head_dim = old.D;
    const detail::InProjLayout layout = detail::make_in_proj_layout<T>(fn, options);
    const Index D = old.D;
    // Each kept head's [D, in] row block of the in-projection and its [D] bias slice, in order.
    const auto cut_in = [&](const T* from, T* to) {
        for (int i : {kQuery, kKey, kValue})
            for (std::size_t n = 0; n < kept[i].size(); ++n)
                std::copy_n(from + old.weight_offset(i, kept[i][n]), D * old.in(i),
                            to + layout.weight_offset(i, static_cast<Index>(n)));
    };
    const auto cut_bias = [&](const Tensor<T>& from) {
        Tensor<T> to(Shape{layout.bias_size()});
        for (int i : {kQuery, kKey, kValue})
            for (std::size_t n = 0; n < kept[i].size(); ++n)
                std::copy_n(from.data() + old.bias_offset(i, kept[i][n]), D,
                            to.data() + layout.bias_offset(i, static_cast<Index>(n)));
        return to;
    };
    // out_proj.weight [E, H D] -> [E, H' D]: each kept query head's D columns.
    const auto cut_out = [&](const T* from, T* to) {
        for (Index r = 0; r < old.E; ++r)
            for (std::size_t n = 0; n < kept[kQuery].size(); ++n)
                std::copy_n(from + r * old.inner() + kept[kQuery][n] * D, D,
                            to + r * layout.inner() + static_cast<Index>(n) * D);
    };
    // bias_k, bias_v [1, 1, Hkv D] -> [1, 1, Hkv' D].
    const auto cut_kv = [&](const Tensor<T>& from) {
        Tensor<T> to(Shape{1, 1, layout.rows(kKey)});
        for (std::size_t n = 0; n < kept[kKey].size(); ++n)
            std::copy_n(from.data() + kept[kKey][n] * D, D, to.data() + static_cast<Index>(n) * D);
        return to;
    };

    WeightMatrix<T> w_in(Shape{layout.weight_size()});
    w_in.set_row_length(layout.kdim == layout.E && layout.vdim == layout.E ? layout.E : 0);
    cut_in(w_in_.value().data(), w_in.value().data());
    if (w_in_.has_grad()) cut_in(w_in_.grad().data(), w_in.grad().data());
    WeightMatrix<T> w_out(Shape{layout.E, layout.inner()});
    cut_out(w_out_.value().data(), w_out.value().data());
    if (w_out_.has_grad()) cut_out(w_out_.grad().data(), w_out.grad().data());
    if (options_.bias) {
        b_in_ = cut_bias(b_in_);
        gb_in_ = cut_bias(gb_in_);
    }
    if (options_.add_bias_kv) {
        bias_k_ = cut_kv(bias_k_);
        bias_v_ = cut_kv(bias_v_);
        gbias_k_ = cut_kv(gbias_k_);
        gbias_v_ = cut_kv(gbias_v_);
    }
    w_in_ = std::move(w_in);
    w_out_ = std::move(w_out);
    options_ = options;
    layout_ = layout;
    return *this;
}

template <class T>
HeadParameters<T> MultiheadAttention<T>::head(Index i) {
    check_weights("headwise::MultiheadAttention::head");
    check_head_index(i);
    allocate_bias_grads();
    return HeadParameters<T>(w_in_.value().data(), options_.bias ? b_in_.data() : nullptr,
                             w_in_.grad().data(), options_.bias ? gb_in_.data() : nullptr, layout_,
                             i);
}

template <class T>
HeadParameters<const T> MultiheadAttention<T>::head(Index i) const {
    check_weights("headwise::MultiheadAttention::head");
    check_head_index(i);
    const_cast<MultiheadAttention&>(*this).allocate_bias_grads();
    return HeadParameters<const T>(w_in_.value().data(), options_.bias ? b_in_.data() : nullptr,
                                   const_cast<WeightMatrix<T>&>(w_in_).grad().data(),
                                   options_.bias ? gb_in_.data() : nullptr, layout_, i);
}

template <class T>
KVCache<T> MultiheadAttention<T>::make_kv_cache(Index batch, Index capacity,
                                                Precision precision) const {
    constexpr const char* fn = "headwise::MultiheadAttention::make_kv_cache";
    if (batch <= 0) throw_invalid_argument(fn, "batch", "must be positive", std::to_string(batch));
    if (capacity <= 0)
        throw_invalid_argument(fn, "capacity", "must be positive", std::to_string(capacity));
    const detail::InProjLayout& layout = layout_;
    if (layout.kdim != layout.E || layout.vdim != layout.E)
        throw std::invalid_argument(
            std::string(fn) +
            ": options.kdim, options.vdim: decode is self-attention and needs kdim == vdim == "
            "embed_dim = " +
            std::to_string(layout.E) + ", got kdim " + std::to_string(layout.kdim) + ", vdim " +
            std::to_string(layout.vdim));
    return KVCache<T>(batch, capacity, layout.E, layout.kv_heads, layout.D, precision);
}

template <class T>
Tensor<T> MultiheadAttention<T>::decode(TensorView<const T> x_new, KVCache<T>& cache,
                                        TensorView<const bool> key_padding,
                                        TensorView<const T> head_mask) {
    Tensor<T> y = Tensor<T>::uninitialized(x_new.shape());  // written in full by decode_into
    decode_into(x_new, cache, y, key_padding, head_mask);
    return y;
}

template <class T>
void MultiheadAttention<T>::decode_into(TensorView<const T> x_new, KVCache<T>& cache,
                                        TensorView<T> out, TensorView<const bool> key_padding,
                                        TensorView<const T> head_mask) {
    // Everything, before anything changes.
    detail::check_decode_arguments(layout_, this->training_, x_new, cache, out, key_padding,
                                   head_mask);
    const Index B = cache.batch(), Tn = x_new.size(-2), E = layout_.E;
    const detail::AttentionCall<T> call = detail::describe_call<T>(
        options_, B, Tn, cache.size() + Tn, false, detail::CallKind::decode);
    // The new tokens are a self-attention call of their own for the projection; one query row
    // per slice is the G heads of a group (detail::attend_cached).
    detail::DecodeBuffers<T>& buffers = cache.decode_buffers();
    buffers.projection.plan_for(detail::ProjectionKey{
        options_.projection, layout_, detail::AttentionGeometry{B, Tn, Tn, Tn}, true, true});
    buffers.size(B * Tn, layout_.inner(),
                 detail::decode_slice_rows(Tn, layout_.group(), call.appended_keys > 0),
                 cache.capacity() + call.appended_keys, layout_.D,
                 call.appended_keys > 0 || cache.precision() == Precision::bf16,
                 detail::max_threads());
    if (options_.rotary.enabled) buffers.size_rotary(B * Tn, layout_.D);
    const detail::AttentionParameters<const T> params = parameter_view();
    const TensorView<const T> x = x_new.reshape(Shape{B * Tn, E});  // [B T, E]

    detail::project<T>(params, {x, x, x}, buffers.projection);  // 1. the new tokens only
    if (options_.rotary.enabled)  // 1b. at their positions in their sequences
        detail::rotate_new_tokens<T>(call, layout_, cache, key_padding, buffers);
    cache.append(  // the new keys and values join the cache
        Tn, [&](Index b, Index h) { return buffers.projection.block(detail::kKey, b, h); },
        [&](Index b, Index h) { return buffers.projection.block(detail::kValue, b, h); },
        key_padding);
    detail::attend_cached<T>(call, params, cache, buffers);  // 2. and 3. over the cache
    if (head_mask.data() != nullptr)                         // 3b. the gates
        detail::gate_decoded_heads<T>(buffers.ctx(), head_mask, B, Tn, layout_);
    detail::project_out<T>(params, buffers.ctx(),  // 4.
                           out.reshape(Shape{B * Tn, E}).matrix());
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_MULTIHEAD_ATTENTION_TEMPLATES(C, F, T) \
    C(class, MultiheadAttention<T>)                            \
    C(struct, AttentionForward<T>)                             \
    C(struct, AttentionGradients<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_MULTIHEAD_ATTENTION_TEMPLATES);
