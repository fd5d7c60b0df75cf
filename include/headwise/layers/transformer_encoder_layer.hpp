// SPDX-License-Identifier: MIT
// TransformerEncoderLayer<T>: torch.nn.TransformerEncoderLayer(batch_first=True), forward and
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
#include "../random.hpp"
#include "../tensor.hpp"
#include "attention/detail/attention_options.hpp"
#include "attention/multihead_attention.hpp"
#include "attention/options.hpp"
#include "detail/transformer_layer.hpp"
#include "dropout.hpp"
#include "feed_forward_activation.hpp"
#include "layer_norm.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace headwise {

/// The constructor arguments of torch.nn.TransformerEncoderLayer (batch_first is always true
/// here), plus how the attention computes its projections.
struct TransformerEncoderLayerOptions {
    Index d_model = 0;             // E
    Index nhead = 1;               // H; must divide d_model
    Index dim_feedforward = 2048;  // F, the hidden width of the feed-forward block
    double dropout = 0.1;          // attention weights, dropout1, the FFN hidden, dropout2
    Activation activation = Activation::relu;
    double layer_norm_eps = 1e-5;
    bool norm_first = false;  // pre-norm (true) or post-norm (false, the paper's)
    Projection projection = Projection::fused;
};

/// What TransformerEncoderLayer::forward keeps for backward in training mode: the inputs of
/// each step. Read only by the layer; users keep it inside TransformerEncoderLayerForward.
template <class T>
struct TransformerEncoderLayerActivations {
    Tensor<T> x;                           // the input
    AttentionForward<T> attn;              // self-attention (its own saved state)
    DropoutForward<T> drop1, drop2, drop;  // dropout1, dropout2 (streams), FFN dropout (its output
                                           // is linear2's input)
    Tensor<T> norm1_in;                    // post-norm: x + sa(x); pre-norm: x
    Tensor<T> norm2_in;                    // post-norm: y1 + ff(y1); pre-norm: h = x + sa(norm1(x))
    Tensor<T> ff_in;                       // linear1's input: norm1's output (post), norm2's (pre)
    Tensor<T> hidden;                      // linear1's output, the activation's input
};

/// What TransformerEncoderLayer::forward returns; keep it until backward (in training mode it
/// holds the intermediates backward needs; in eval mode only the output).
template <class T>
struct TransformerEncoderLayerForward {
    Tensor<T> output;  // the input's shape, [B, L, E] or [L, E]
    /// The self-attention's weights when masks.need_weights: each head's probabilities
    /// [B, H, L, L] with masks.average_attn_weights = false (gated by masks.head_mask), their
    /// mean over heads [B, L, L] otherwise; empty without need_weights.
    Tensor<T> attn_weights;
    std::shared_ptr<const TransformerEncoderLayerActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// One transformer encoder block (Vaswani et al. 2017, Section 3.1) exactly as
/// torch.nn.TransformerEncoderLayer(batch_first=True) computes it, with
///   sa(x) = dropout1(self_attn(x, x, x, masks)),
///   ff(x) = dropout2(linear2(dropout(activation(linear1(x))))):
///   norm_first = false:  x = norm1(x + sa(x));  out = norm2(x + ff(x))
///   norm_first = true:   x = x + sa(norm1(x));  out = x + ff(norm2(x))
/// The self-attention's own dropout (on the attention weights) has the same p. Parameters under
/// torch's names: self_attn.in_proj_weight, self_attn.in_proj_bias, self_attn.out_proj.weight,
/// self_attn.out_proj.bias, linear1.weight, linear1.bias, linear2.weight, linear2.bias,
/// norm1.weight, norm1.bias, norm2.weight, norm2.bias — a torch state_dict() loads as it is.
/// Dropout masks come from the constructor's seed (no global generator), and backward
/// regenerates them; one layer may run several forwards before their backwards.
template <class T>
class TransformerEncoderLayer : public Module<TransformerEncoderLayer<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::TransformerEncoderLayer";
    using Options = TransformerEncoderLayerOptions;

    /// Validates the options (positive sizes, nhead dividing d_model, dropout in [0, 1), finite
    /// non-negative eps, known activation and projection) and initialises the parameters as torch
    /// does (attention as MultiheadAttention, the linears as nn.Linear, the norms to ones and
    /// zeros), from `seed`.
    explicit TransformerEncoderLayer(const Options& options, std::uint64_t seed = 0);

    /// x [B, L, d_model] (or [L, d_model]); masks as for MultiheadAttention::forward: head_mask
    /// gates the heads (head_mask_grad collects d loss / d xi in backward), need_weights returns
    /// the attention weights in attn_weights (per head with average_attn_weights = false).
    TransformerEncoderLayerForward<T> forward(TensorView<const T> x,
                                              const AttentionMasks<T>& masks = {});
    /// Gradient of sum(output ⊙ dy) with respect to x for the call that produced `fwd`; the
    /// parameter gradients accumulate (until zero_grad()). Throws std::invalid_argument for a
    /// result of an eval-mode forward, shape_error for dy of another shape than the output.
    Tensor<T> backward(const TransformerEncoderLayerForward<T>& fwd, TensorView<const T> dy);

    /// Changes the attention's projection computation; parameters stay as they are. Throws
    /// std::invalid_argument for a value that is no Projection enumerator, changing nothing.
    TransformerEncoderLayer& with_projection(Projection projection) {
        detail::check_projection("headwise::TransformerEncoderLayer::with_projection", "projection",
                                 projection);
        self_attn_.with_projection(projection);
        options_.projection = projection;
        return *this;
    }
    const Options& options() const noexcept { return options_; }

    /// with_precision (Module): the attention projections, linear1 and linear2 multiply in the
    /// chosen format; the norms, the activation, dropout and the residual sums stay float.

    MultiheadAttention<T>& self_attn() noexcept { return self_attn_; }
    const MultiheadAttention<T>& self_attn() const noexcept { return self_attn_; }
    Linear<T>& linear1() noexcept { return linear1_; }
    Linear<T>& linear2() noexcept { return linear2_; }
    LayerNorm<T>& norm1() noexcept { return norm1_; }
    LayerNorm<T>& norm2() noexcept { return norm2_; }

    /// The sub-modules under torch's names, in its state_dict() order (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("self_attn", self_attn_);
        d.child("linear1", linear1_);
        d.child("linear2", linear2_);
        d.child("norm1", norm1_);
        d.child("norm2", norm2_);
        d.child("dropout", dropout_);
        d.child("dropout1", dropout1_);
        d.child("dropout2", dropout2_);
    }

private:
    static const Options& checked(const Options& o);
    static MultiheadAttentionOptions attention_options(const Options& o);
    Tensor<T> activate(const Tensor<T>& x) const;
    Tensor<T> activate_backward(const Tensor<T>& x, const Tensor<T>& dy) const;

    Options options_;
    Generator rng_;  // draws the linears' initial weights
    MultiheadAttention<T> self_attn_;
    Linear<T> linear1_, linear2_;
    LayerNorm<T> norm1_, norm2_;
    Dropout<T> dropout_, dropout1_, dropout2_;

    /// The seed of child `child` (0: the weights' generator, 1: self_attn, 2-4: the dropouts).
    static std::uint64_t child_seed(std::uint64_t seed, std::uint64_t child) noexcept {
        return ops::Dropout::stream_seed(seed, child);
    }
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
const TransformerEncoderLayerOptions& TransformerEncoderLayer<T>::checked(const Options& o) {
    detail::check_transformer_layer_options(
        "headwise::TransformerEncoderLayer::TransformerEncoderLayer", o);
    return o;
}

template <class T>
MultiheadAttentionOptions TransformerEncoderLayer<T>::attention_options(const Options& o) {
    MultiheadAttentionOptions a;
    a.embed_dim = o.d_model;
    a.num_heads = o.nhead;
    a.dropout = o.dropout;
    a.projection = o.projection;
    return a;
}

template <class T>
TransformerEncoderLayer<T>::TransformerEncoderLayer(const Options& options, std::uint64_t seed)
    : options_(checked(options)),
      rng_(child_seed(seed, 0)),
      self_attn_(attention_options(options), child_seed(seed, 1)),
      linear1_(options.d_model, options.dim_feedforward, true, rng_),
      linear2_(options.dim_feedforward, options.d_model, true, rng_),
      norm1_(options.d_model, options.layer_norm_eps),
      norm2_(options.d_model, options.layer_norm_eps),
      dropout_(options.dropout, child_seed(seed, 2)),
      dropout1_(options.dropout, child_seed(seed, 3)),
      dropout2_(options.dropout, child_seed(seed, 4)) {}

template <class T>
Tensor<T> TransformerEncoderLayer<T>::activate(const Tensor<T>& x) const {
    return detail::feed_forward_activation(options_.activation, x);
}

template <class T>
Tensor<T> TransformerEncoderLayer<T>::activate_backward(const Tensor<T>& x,
                                                        const Tensor<T>& dy) const {
    return detail::feed_forward_activation_backward(options_.activation, x, dy);
}

template <class T>
TransformerEncoderLayerForward<T> TransformerEncoderLayer<T>::forward(
    TensorView<const T> x, const AttentionMasks<T>& masks) {
    constexpr const char* fn = "headwise::TransformerEncoderLayer::forward";
    if ((x.rank() != 2 && x.rank() != 3) || x.shape().back() != options_.d_model)
        throw shape_error(fn, "x",
                          "[B, L, " + std::to_string(options_.d_model) + "] or [L, " +
                              std::to_string(options_.d_model) + "]",
                          x.shape());
    auto s = std::make_shared<TransformerEncoderLayerActivations<T>>();
    const bool keep = this->is_training();
    auto add = [](TensorView<const T> a, TensorView<const T> b) {
        Tensor<T> c = Tensor<T>::uninitialized(a.shape());  // [..., E]
        c.matrix() = a.matrix() + b.matrix();
        return c;
    };
    // Self-attention block: sa(z) = dropout1(self_attn(z, z, z)).
    auto self_attention = [&](TensorView<const T> z) {
        s->attn = self_attn_.forward(z, z, z, masks);
        s->drop1 = dropout1_.forward(s->attn.output);
        return s->drop1.output.view();  // [..., E]
    };
    // Feed-forward block: ff(z) = dropout2(linear2(dropout(activation(linear1(z))))).
    auto feed_forward = [&](TensorView<const T> z) {
        s->hidden = linear1_.forward(z);  // [..., F]
        s->drop = dropout_.forward(activate(s->hidden));
        s->drop2 = dropout2_.forward(linear2_.forward(s->drop.output));
        return s->drop2.output.view();  // [..., E]
    };

    TransformerEncoderLayerForward<T> f;
    if (!options_.norm_first) {
        s->norm1_in = add(x, self_attention(x));              // x + sa(x)
        s->ff_in = norm1_.forward(s->norm1_in);               // y1 = norm1(x + sa(x))
        s->norm2_in = add(s->ff_in, feed_forward(s->ff_in));  // y1 + ff(y1)
        f.output = norm2_.forward(s->norm2_in);
    } else {
        s->norm1_in = Tensor<T>(x.shape());
        s->norm1_in.matrix() = x.matrix();
        const Tensor<T> n1 = norm1_.forward(x);               // norm1(x)
        s->norm2_in = add(x, self_attention(n1));             // h = x + sa(norm1(x))
        s->ff_in = norm2_.forward(s->norm2_in);               // norm2(h)
        f.output = add(s->norm2_in, feed_forward(s->ff_in));  // h + ff(norm2(h))
    }
    // The weights go to the caller; backward reads the attention's own saved state, not them.
    if (masks.need_weights) f.attn_weights = std::move(s->attn.attn_weights);
    if (keep) f.saved = std::move(s);
    return f;
}

template <class T>
Tensor<T> TransformerEncoderLayer<T>::backward(const TransformerEncoderLayerForward<T>& fwd,
                                               TensorView<const T> dy) {
    constexpr const char* fn = "headwise::TransformerEncoderLayer::backward";
    this->check_not_stored(fn);
    detail::check_float_weights(fn, this->float_weights_released(),
                                "backward needs the float weights (the layer is inference-only)");
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from a forward in eval mode, which saves "
                                    "nothing for backward; call train() before forward");
    detail::check_shape(fn, "grad_output", dy.shape(), fwd.output.shape());
    const TransformerEncoderLayerActivations<T>& s = *fwd.saved;

    // ff(z) backward: dz = d ff / dz applied to d_ff, parameters' gradients accumulated.
    auto feed_forward_backward = [&](TensorView<const T> d_ff, TensorView<T> dz) {
        const Tensor<T> d_lin2 = dropout2_.backward(s.drop2, d_ff);         // [..., E]
        const Tensor<T> d_drop = linear2_.backward(s.drop.output, d_lin2);  // [..., F]
        const Tensor<T> d_act = dropout_.backward(s.drop, d_drop);          // [..., F]
        const Tensor<T> d_hidden = activate_backward(s.hidden, d_act);      // [..., F]
        linear1_.backward_into(s.ff_in, d_hidden, dz);                      // dz += ...
    };
    // sa(z) backward: the query, key and value gradients of z summed.
    auto self_attention_backward = [&](TensorView<const T> d_sa) {
        const Tensor<T> d_attn = dropout1_.backward(s.drop1, d_sa);  // [..., E]
        AttentionGradients<T> g = self_attn_.backward(s.attn, d_attn);
        g.query.matrix() += g.key.matrix() + g.value.matrix();
        return std::move(g.query);  // [..., E]
    };

    if (!options_.norm_first) {
        // out = norm2(y1 + ff(y1)), y1 = norm1(x + sa(x)).
        const Tensor<T> d_norm2_in = norm2_.backward(s.norm2_in, dy);  // [..., E]
        Tensor<T> d_y1 = d_norm2_in;                                   // residual path
        feed_forward_backward(d_norm2_in, d_y1);
        const Tensor<T> d_norm1_in = norm1_.backward(s.norm1_in, d_y1);  // [..., E]
        Tensor<T> dx = self_attention_backward(d_norm1_in);
        dx.matrix() += d_norm1_in.matrix();  // residual path
        return dx;
    }
    // out = h + ff(norm2(h)), h = x + sa(norm1(x)).
    Tensor<T> d_norm2_out(dy.shape());  // [..., E]
    feed_forward_backward(dy, d_norm2_out);
    Tensor<T> d_h(dy.shape());  // [..., E]
    d_h.matrix() = dy.matrix();
    norm2_.backward_into(s.norm2_in, d_norm2_out, d_h);
    const Tensor<T> d_norm1_out = self_attention_backward(d_h);  // [..., E]
    Tensor<T> dx = d_h;                                          // residual path
    norm1_.backward_into(s.norm1_in, d_norm1_out, dx);
    return dx;
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_TRANSFORMER_ENCODER_LAYER_TEMPLATES(C, F, T) \
    C(class, TransformerEncoderLayer<T>)                             \
    C(struct, TransformerEncoderLayerActivations<T>)                 \
    C(struct, TransformerEncoderLayerForward<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_TRANSFORMER_ENCODER_LAYER_TEMPLATES);
