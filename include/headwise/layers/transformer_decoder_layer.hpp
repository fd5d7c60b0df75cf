// SPDX-License-Identifier: MIT
// TransformerDecoderLayer<T>: torch.nn.TransformerDecoderLayer(batch_first=True), forward and
// backward, under torch's parameter names.
#pragma once

#include <cmath>      // std::isfinite
#include <cstdint>    // std::uint64_t
#include <memory>     // std::shared_ptr, std::make_shared
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::move

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../detail/precision_check.hpp"
#include "../error.hpp"
#include "../ops/activation.hpp"
#include "../ops/dropout.hpp"
#include "../precision.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "attention/detail/attention_options.hpp"
#include "attention/multihead_attention.hpp"
#include "attention/options.hpp"
#include "detail/instance_id.hpp"
#include "detail/transformer_layer.hpp"
#include "dropout.hpp"
#include "feed_forward_activation.hpp"
#include "layer_norm.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace headwise {

/// The constructor arguments of torch.nn.TransformerDecoderLayer (batch_first is always true
/// here), plus how both attentions compute their projections.
struct TransformerDecoderLayerOptions {
    Index d_model = 0;             // E, of the target and of the memory
    Index nhead = 1;               // H; must divide d_model
    Index dim_feedforward = 2048;  // F, the hidden width of the feed-forward block
    double dropout = 0.1;          // both attentions' weights, dropout1-3, the FFN hidden
    Activation activation = Activation::relu;
    double layer_norm_eps = 1e-5;
    bool norm_first = false;  // pre-norm (true) or post-norm (false, the paper's)
    Projection projection = Projection::fused;
};

/// What TransformerDecoderLayer::forward keeps for backward in training mode: the inputs of
/// each step. Read only by the layer; users keep it inside TransformerDecoderLayerForward.
template <class T>
struct TransformerDecoderLayerActivations {
    std::uint64_t layer = 0;                // the InstanceId of the layer that ran forward
    AttentionForward<T> self_attn;          // the target's self-attention (its own saved state)
    AttentionForward<T> cross_attn;         // multihead_attn: the target over the memory
    DropoutForward<T> drop1, drop2, drop3;  // after self_attn, multihead_attn, linear2
    DropoutForward<T> drop;                 // FFN dropout (its output is linear2's input)
    // The norms' inputs; post-norm: y1 = norm1(.), y2 = norm2(.); pre-norm: h1, h2 residual sums.
    Tensor<T> norm1_in;  // post-norm: x + sa(x);       pre-norm: x
    Tensor<T> norm2_in;  // post-norm: y1 + ca(y1, m);  pre-norm: h1 = x + sa(norm1(x))
    Tensor<T> norm3_in;  // post-norm: y2 + ff(y2);     pre-norm: h2 = h1 + ca(norm2(h1), m)
    Tensor<T> ff_in;     // linear1's input: y2 (post-norm), norm3(h2) (pre-norm)
    Tensor<T> hidden;    // linear1's output, the activation's input
};

/// What TransformerDecoderLayer::forward returns; keep it until backward (in training mode it
/// holds the intermediates backward needs; in eval mode only the output).
template <class T>
struct TransformerDecoderLayerForward {
    Tensor<T> output;  // the target's shape, [B, L, E] or [L, E]
    std::shared_ptr<const TransformerDecoderLayerActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// What TransformerDecoderLayer::backward returns: the gradient of each input, of its shape.
template <class T>
struct TransformerDecoderLayerGradients {
    Tensor<T> tgt;     // [B, L, E] ([L, E])
    Tensor<T> memory;  // [B, S, E] ([S, E]): the cross-attention's key and value gradients summed
};

/// One transformer decoder block (Vaswani et al. 2017, Section 3.1) exactly as
/// torch.nn.TransformerDecoderLayer(batch_first=True) computes it, with
///   sa(x)    = dropout1(self_attn(x, x, x, tgt_masks)),
///   ca(x, m) = dropout2(multihead_attn(x, m, m, memory_masks)),
///   ff(x)    = dropout3(linear2(dropout(activation(linear1(x))))):
///   norm_first = false:  x = norm1(x + sa(x));  x = norm2(x + ca(x, m));  out = norm3(x + ff(x))
///   norm_first = true:   x = x + sa(norm1(x));  x = x + ca(norm2(x), m);  out = x + ff(norm3(x))
/// Both attentions' own dropout (on the attention weights) has the same p. Parameters under
/// torch's names: self_attn.*, multihead_attn.* (as MultiheadAttention's), linear1.weight,
/// linear1.bias, linear2.weight, linear2.bias, norm1.*, norm2.*, norm3.* (weight, bias) — a torch
/// state_dict() loads as it is. Dropout masks come from the constructor's seed (no global
/// generator), and backward regenerates them; one layer may run several forwards before their
/// backwards, and backward accepts only this layer's own records.
template <class T>
class TransformerDecoderLayer : public Module<TransformerDecoderLayer<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::TransformerDecoderLayer";
    using Options = TransformerDecoderLayerOptions;

    /// Validates the options (positive sizes, nhead dividing d_model, dropout in [0, 1), finite
    /// non-negative eps, known activation and projection) and initialises the parameters as torch
    /// does (both attentions as MultiheadAttention, the linears as nn.Linear, the norms to ones
    /// and zeros), from `seed`.
    explicit TransformerDecoderLayer(const Options& options, std::uint64_t seed = 0);

    /// tgt [B, L, d_model] and memory [B, S, d_model] (or [L, d_model] and [S, d_model]);
    /// tgt_masks for the self-attention (attn_mask / attn_bias [L, L] or [B, H, L, L],
    /// key_padding_mask [B, L], is_causal: torch's tgt_mask, tgt_key_padding_mask,
    /// tgt_is_causal), memory_masks for the cross-attention ([L, S] or [B, H, L, S], [B, S]:
    /// memory_mask, memory_key_padding_mask). Checks every shape before anything changes.
    TransformerDecoderLayerForward<T> forward(TensorView<const T> tgt, TensorView<const T> memory,
                                              const AttentionMasks<T>& tgt_masks = {},
                                              const AttentionMasks<T>& memory_masks = {});
    /// Gradients of sum(output ⊙ dy) with respect to tgt and memory for this layer's call that
    /// produced `fwd`; the parameter gradients accumulate (until zero_grad()). Throws
    /// std::invalid_argument for a result of an eval-mode forward or of another layer's forward
    /// (a copy is another layer), shape_error for dy of another shape than the output.
    TransformerDecoderLayerGradients<T> backward(const TransformerDecoderLayerForward<T>& fwd,
                                                 TensorView<const T> dy);

    /// Changes both attentions' projection computation; parameters stay as they are. Throws
    /// std::invalid_argument for a value that is no Projection enumerator, changing nothing.
    TransformerDecoderLayer& with_projection(Projection projection) {
        detail::check_projection("headwise::TransformerDecoderLayer::with_projection", "projection",
                                 projection);
        self_attn_.with_projection(projection);
        multihead_attn_.with_projection(projection);
        options_.projection = projection;
        return *this;
    }
    const Options& options() const noexcept { return options_; }

    /// with_precision (Module): the attention projections, linear1 and linear2 multiply in the
    /// chosen format; the norms, the activation, dropout and the residual sums stay float.

    MultiheadAttention<T>& self_attn() noexcept { return self_attn_; }
    const MultiheadAttention<T>& self_attn() const noexcept { return self_attn_; }
    MultiheadAttention<T>& multihead_attn() noexcept { return multihead_attn_; }
    const MultiheadAttention<T>& multihead_attn() const noexcept { return multihead_attn_; }
    Linear<T>& linear1() noexcept { return linear1_; }
    Linear<T>& linear2() noexcept { return linear2_; }
    LayerNorm<T>& norm1() noexcept { return norm1_; }
    LayerNorm<T>& norm2() noexcept { return norm2_; }
    LayerNorm<T>& norm3() noexcept { return norm3_; }

    /// The sub-modules under torch's names, in its state_dict() order (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("self_attn", self_attn_);
        d.child("multihead_attn", multihead_attn_);
        d.child("linear1", linear1_);
        d.child("linear2", linear2_);
        d.child("norm1", norm1_);
        d.child("norm2", norm2_);
        d.child("norm3", norm3_);
        d.child("dropout", dropout_);
        d.child("dropout1", dropout1_);
        d.child("dropout2", dropout2_);
        d.child("dropout3", dropout3_);
    }

private:
    static const Options& checked(const Options& o);
    static MultiheadAttentionOptions attention_options(const Options& o);
    void check_forward(TensorView<const T> tgt, TensorView<const T> memory,
                       const AttentionMasks<T>& tgt_masks,
                       const AttentionMasks<T>& memory_masks) const;
    void check_masks(const char* argument, const AttentionMasks<T>& m, Index B, Index L, Index S,
                     bool batched) const;
    Tensor<T> activate(const Tensor<T>& x) const;
    Tensor<T> activate_backward(const Tensor<T>& x, const Tensor<T>& dy) const;

    Options options_;
    detail::InstanceId id_;  // names this object in its forward records
    Generator rng_;          // draws the linears' initial weights
    MultiheadAttention<T> self_attn_, multihead_attn_;
    Linear<T> linear1_, linear2_;
    LayerNorm<T> norm1_, norm2_, norm3_;
    Dropout<T> dropout_, dropout1_, dropout2_, dropout3_;

    /// The seed of child `child` (0: the weights' generator, 1: self_attn, 2: multihead_attn,
    /// 3-6: dropout, dropout1, dropout2, dropout3).
    static std::uint64_t child_seed(std::uint64_t seed, std::uint64_t child) noexcept {
        return ops::Dropout::stream_seed(seed, child);
    }
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
const TransformerDecoderLayerOptions& TransformerDecoderLayer<T>::checked(const Options& o) {
    detail::check_transformer_layer_options(
        "headwise::TransformerDecoderLayer::TransformerDecoderLayer", o);
    return o;
}

template <class T>
MultiheadAttentionOptions TransformerDecoderLayer<T>::attention_options(const Options& o) {
    MultiheadAttentionOptions a;
    a.embed_dim = o.d_model;
    a.num_heads = o.nhead;
    a.dropout = o.dropout;
    a.projection = o.projection;
    return a;
}

template <class T>
TransformerDecoderLayer<T>::TransformerDecoderLayer(const Options& options, std::uint64_t seed)
    : options_(checked(options)),
      rng_(child_seed(seed, 0)),
      self_attn_(attention_options(options), child_seed(seed, 1)),
      multihead_attn_(attention_options(options), child_seed(seed, 2)),
      linear1_(options.d_model, options.dim_feedforward, true, rng_),
      linear2_(options.dim_feedforward, options.d_model, true, rng_),
      norm1_(options.d_model, options.layer_norm_eps),
      norm2_(options.d_model, options.layer_norm_eps),
      norm3_(options.d_model, options.layer_norm_eps),
      dropout_(options.dropout, child_seed(seed, 3)),
      dropout1_(options.dropout, child_seed(seed, 4)),
      dropout2_(options.dropout, child_seed(seed, 5)),
      dropout3_(options.dropout, child_seed(seed, 6)) {}

template <class T>
void TransformerDecoderLayer<T>::check_masks(const char* argument, const AttentionMasks<T>& m,
                                             Index B, Index L, Index S, bool batched) const {
    // The attention would check these too, but only when it runs: the memory masks after the
    // self-attention has already drawn its dropout masks. Checked here first, under the
    // decoder's argument names.
    constexpr const char* fn = "headwise::TransformerDecoderLayer::forward";
    const std::string name(argument);
    const Shape ls{L, S};
    const Shape bhls{B, options_.nhead, L, S};
    const std::string two = ls.str() + " or " + bhls.str();
    if (!detail::mask_absent(m.attn_mask) && m.attn_mask.shape() != ls &&
        m.attn_mask.shape() != bhls)
        throw shape_error(fn, name + ".attn_mask", two, m.attn_mask.shape());
    if (!detail::mask_absent(m.attn_bias) && m.attn_bias.shape() != ls &&
        m.attn_bias.shape() != bhls)
        throw shape_error(fn, name + ".attn_bias", two, m.attn_bias.shape());
    if (!detail::mask_absent(m.key_padding_mask))
        detail::check_shape(fn, (name + ".key_padding_mask").c_str(), m.key_padding_mask.shape(),
                            batched ? Shape{B, S} : Shape{S});
}

template <class T>
void TransformerDecoderLayer<T>::check_forward(TensorView<const T> tgt, TensorView<const T> memory,
                                               const AttentionMasks<T>& tgt_masks,
                                               const AttentionMasks<T>& memory_masks) const {
    constexpr const char* fn = "headwise::TransformerDecoderLayer::forward";
    const std::string e = std::to_string(options_.d_model);
    if ((tgt.rank() != 2 && tgt.rank() != 3) || tgt.shape().back() != options_.d_model)
        throw shape_error(fn, "tgt", "[B, L, " + e + "] or [L, " + e + "]", tgt.shape());
    const bool batched = tgt.rank() == 3;
    const Index B = batched ? tgt.size(0) : 1;
    const Index L = tgt.size(-2);
    if (memory.rank() != tgt.rank() || (batched && memory.size(0) != B) ||
        memory.shape().back() != options_.d_model)
        throw shape_error(fn, "memory",
                          batched ? "[" + std::to_string(B) + ", S, " + e + "]" : "[S, " + e + "]",
                          memory.shape());
    const Index S = memory.size(-2);
    check_masks("tgt_masks", tgt_masks, B, L, L, batched);
    check_masks("memory_masks", memory_masks, B, L, S, batched);
}

template <class T>
Tensor<T> TransformerDecoderLayer<T>::activate(const Tensor<T>& x) const {
    return detail::feed_forward_activation(options_.activation, x);
}

template <class T>
Tensor<T> TransformerDecoderLayer<T>::activate_backward(const Tensor<T>& x,
                                                        const Tensor<T>& dy) const {
    return detail::feed_forward_activation_backward(options_.activation, x, dy);
}

template <class T>
TransformerDecoderLayerForward<T> TransformerDecoderLayer<T>::forward(
    TensorView<const T> tgt, TensorView<const T> memory, const AttentionMasks<T>& tgt_masks,
    const AttentionMasks<T>& memory_masks) {
    check_forward(tgt, memory, tgt_masks, memory_masks);  // throws before any stream is drawn
    auto s = std::make_shared<TransformerDecoderLayerActivations<T>>();
    s->layer = id_.value();
    const bool keep = this->is_training();
    auto add = [](TensorView<const T> a, TensorView<const T> b) {
        Tensor<T> c = Tensor<T>::uninitialized(a.shape());  // [..., E]
        c.matrix() = a.matrix() + b.matrix();
        return c;
    };
    // Self-attention block: sa(z) = dropout1(self_attn(z, z, z)).
    auto self_attention = [&](TensorView<const T> z) {
        s->self_attn = self_attn_.forward(z, z, z, tgt_masks);
        s->drop1 = dropout1_.forward(s->self_attn.output);
        return s->drop1.output.view();  // [..., E]
    };
    // Cross-attention block: ca(z, m) = dropout2(multihead_attn(z, m, m)).
    auto cross_attention = [&](TensorView<const T> z) {
        s->cross_attn = multihead_attn_.forward(z, memory, memory, memory_masks);
        s->drop2 = dropout2_.forward(s->cross_attn.output);
        return s->drop2.output.view();  // [..., E]
    };
    // Feed-forward block: ff(z) = dropout3(linear2(dropout(activation(linear1(z))))).
    auto feed_forward = [&](TensorView<const T> z) {
        s->hidden = linear1_.forward(z);  // [..., F]
        s->drop = dropout_.forward(activate(s->hidden));
        s->drop3 = dropout3_.forward(linear2_.forward(s->drop.output));
        return s->drop3.output.view();  // [..., E]
    };

    TransformerDecoderLayerForward<T> f;
    if (!options_.norm_first) {
        s->norm1_in = add(tgt, self_attention(tgt));          // x + sa(x)
        const Tensor<T> y1 = norm1_.forward(s->norm1_in);     // y1 = norm1(x + sa(x))
        s->norm2_in = add(y1, cross_attention(y1));           // y1 + ca(y1, m)
        s->ff_in = norm2_.forward(s->norm2_in);               // y2 = norm2(y1 + ca(y1, m))
        s->norm3_in = add(s->ff_in, feed_forward(s->ff_in));  // y2 + ff(y2)
        f.output = norm3_.forward(s->norm3_in);
    } else {
        s->norm1_in = Tensor<T>(tgt.shape());
        s->norm1_in.matrix() = tgt.matrix();
        const Tensor<T> n1 = norm1_.forward(tgt);             // norm1(x)
        s->norm2_in = add(tgt, self_attention(n1));           // h1 = x + sa(norm1(x))
        const Tensor<T> n2 = norm2_.forward(s->norm2_in);     // norm2(h1)
        s->norm3_in = add(s->norm2_in, cross_attention(n2));  // h2 = h1 + ca(norm2(h1), m)
        s->ff_in = norm3_.forward(s->norm3_in);               // norm3(h2)
        f.output = add(s->norm3_in, feed_forward(s->ff_in));  // h2 + ff(norm3(h2))
    }
    if (keep) f.saved = std::move(s);
    return f;
}

template <class T>
TransformerDecoderLayerGradients<T> TransformerDecoderLayer<T>::backward(
    const TransformerDecoderLayerForward<T>& fwd, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::TransformerDecoderLayer::backward";
    this->check_not_stored(fn);
    detail::check_float_weights(fn, this->float_weights_released(),
                                "backward needs the float weights (the layer is inference-only)");
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from a forward in eval mode, which saves "
                                    "nothing for backward; call train() before forward");
    // Another layer's record has activations of other parameters (and, with other options,
    // other shapes): its gradients would be silently wrong, so it is refused outright.
    if (fwd.saved->layer != id_.value())
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from another layer's forward (a copy of a layer "
                                    "is another layer); pass a result of this layer's forward");
    detail::check_shape(fn, "grad_output", dy.shape(), fwd.output.shape());
    const TransformerDecoderLayerActivations<T>& s = *fwd.saved;

    // ff(z) backward: dz += d ff / dz applied to d_ff, parameters' gradients accumulated.
    auto feed_forward_backward = [&](TensorView<const T> d_ff, TensorView<T> dz) {
        const Tensor<T> d_lin2 = dropout3_.backward(s.drop3, d_ff);         // [..., E]
        const Tensor<T> d_drop = linear2_.backward(s.drop.output, d_lin2);  // [..., F]
        const Tensor<T> d_act = dropout_.backward(s.drop, d_drop);          // [..., F]
        const Tensor<T> d_hidden = activate_backward(s.hidden, d_act);      // [..., F]
        linear1_.backward_into(s.ff_in, d_hidden, dz);                      // dz += ...
    };
    // sa(z) backward: the query, key and value gradients of z, gathered.
    auto self_attention_backward = [&](TensorView<const T> d_sa) {
        const Tensor<T> d_attn = dropout1_.backward(s.drop1, d_sa);  // [..., E]
        AttentionBackwardOptions once;
        once.combine_self = true;
        AttentionGradients<T> g = self_attn_.backward(s.self_attn, d_attn, once);
        if (g.input.numel() != 0 || g.query.numel() == 0) return std::move(g.input);  // [..., E]
        g.query.matrix() += g.key.matrix() + g.value.matrix();
        return std::move(g.query);  // [..., E]
    };
    // ca(z, m) backward: dz (the query's gradient) returned, the key's and value's into dmemory.
    TransformerDecoderLayerGradients<T> result;
    auto cross_attention_backward = [&](TensorView<const T> d_ca) {
        const Tensor<T> d_attn = dropout2_.backward(s.drop2, d_ca);  // [..., E]
        AttentionGradients<T> g = multihead_attn_.backward(s.cross_attn, d_attn);
        result.memory = std::move(g.key);  // [B, S, E]
        result.memory.matrix() += g.value.matrix();
        return std::move(g.query);  // [..., E]
    };

    if (!options_.norm_first) {
        // out = norm3(y2 + ff(y2)), y2 = norm2(y1 + ca(y1, m)), y1 = norm1(x + sa(x)).
        const Tensor<T> d_norm3_in = norm3_.backward(s.norm3_in, dy);  // [..., E]
        Tensor<T> d_y2 = d_norm3_in;                                   // residual path
        feed_forward_backward(d_norm3_in, d_y2);
        const Tensor<T> d_norm2_in = norm2_.backward(s.norm2_in, d_y2);  // [..., E]
        Tensor<T> d_y1 = cross_attention_backward(d_norm2_in);
        d_y1.matrix() += d_norm2_in.matrix();                            // residual path
        const Tensor<T> d_norm1_in = norm1_.backward(s.norm1_in, d_y1);  // [..., E]
        result.tgt = self_attention_backward(d_norm1_in);
        result.tgt.matrix() += d_norm1_in.matrix();  // residual path
        return result;
    }
    // out = h2 + ff(norm3(h2)), h2 = h1 + ca(norm2(h1), m), h1 = x + sa(norm1(x)).
    Tensor<T> d_norm3_out(dy.shape());  // [..., E]
    feed_forward_backward(dy, d_norm3_out);
    Tensor<T> d_h2(dy.shape());  // [..., E]
    d_h2.matrix() = dy.matrix();
    norm3_.backward_into(s.norm3_in, d_norm3_out, d_h2);
    const Tensor<T> d_norm2_out = cross_attention_backward(d_h2);  // [..., E]
    Tensor<T> d_h1 = d_h2;                                         // residual path
    norm2_.backward_into(s.norm2_in, d_norm2_out, d_h1);
    const Tensor<T> d_norm1_out = self_attention_backward(d_h1);  // [..., E]
    result.tgt = d_h1;                                            // residual path
    norm1_.backward_into(s.norm1_in, d_norm1_out, result.tgt);
    return result;
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_TRANSFORMER_DECODER_LAYER_TEMPLATES(C, F, T) \
    C(class, TransformerDecoderLayer<T>)                             \
    C(struct, TransformerDecoderLayerActivations<T>)                 \
    C(struct, TransformerDecoderLayerForward<T>)                     \
    C(struct, TransformerDecoderLayerGradients<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_TRANSFORMER_DECODER_LAYER_TEMPLATES);
