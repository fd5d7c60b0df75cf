// SPDX-License-Identifier: MIT
// What the transformer encoder and decoder layers share: the check of their common options and
// the feed-forward activation with its backward.
#pragma once

#include <cmath>   // std::isfinite
#include <string>  // std::to_string

#include "../../detail/number_string.hpp"
#include "../../error.hpp"
#include "../../ops/activation.hpp"
#include "../../tensor.hpp"
#include "../attention/detail/attention_options.hpp"
#include "../attention/options.hpp"
#include "../feed_forward_activation.hpp"

namespace headwise::detail {

/// Throws std::invalid_argument naming `fn` and the option unless the options that
/// TransformerEncoderLayerOptions and TransformerDecoderLayerOptions share are valid. Checked
/// before the members that take them would blame themselves (LayerNorm::eps, MultiheadAttention's
/// options.projection) for the layer's option.
template <class Options>
void check_transformer_layer_options(const char* fn, const Options& o) {
    if (o.d_model <= 0)
        throw_invalid_argument(fn, "options.d_model", "must be positive",
                               std::to_string(o.d_model));
    if (o.nhead <= 0 || o.d_model % o.nhead != 0)
        throw_invalid_argument(fn, "options.nhead",
                               "must be positive and divide d_model = " + std::to_string(o.d_model),
                               std::to_string(o.nhead));
    if (o.dim_feedforward <= 0)
        throw_invalid_argument(fn, "options.dim_feedforward", "must be positive",
                               std::to_string(o.dim_feedforward));
    if (!(o.dropout >= 0.0 && o.dropout < 1.0))
        throw_invalid_argument(fn, "options.dropout", "must be in [0, 1)", shortest_str(o.dropout));
    if (!(o.layer_norm_eps >= 0.0 && std::isfinite(o.layer_norm_eps)))
        throw_invalid_argument(fn, "options.layer_norm_eps", "must be finite and non-negative",
                               shortest_str(o.layer_norm_eps));
    if (o.activation != Activation::relu && o.activation != Activation::gelu)
        throw_invalid_argument(
            fn, "options.activation", "must be relu or gelu",
            "Activation(" + std::to_string(static_cast<int>(o.activation)) + ")");
    check_projection(fn, "options.projection", o.projection);
}

/// The feed-forward block's activation of `x` [..., F].
template <class T>
Tensor<T> feed_forward_activation(Activation activation, const Tensor<T>& x) {
    Tensor<T> y = Tensor<T>::uninitialized(x.shape());  // [..., F]
    if (activation == Activation::relu)
        ops::relu_forward(x.data(), x.numel(), y.data());
    else
        ops::gelu_forward(x.data(), x.numel(), ops::GeluApproximation::none, y.data());
    return y;
}

/// Its backward: dx [..., F] from the forward's input x and dy.
template <class T>
Tensor<T> feed_forward_activation_backward(Activation activation, const Tensor<T>& x,
                                           const Tensor<T>& dy) {
    Tensor<T> dx(x.shape());  // [..., F], zero: the kernels accumulate
    if (activation == Activation::relu)
        ops::relu_backward(x.data(), dy.data(), x.numel(), dx.data());
    else
        ops::gelu_backward(x.data(), dy.data(), x.numel(), ops::GeluApproximation::none, dx.data());
    return dx;
}

}  // namespace headwise::detail
