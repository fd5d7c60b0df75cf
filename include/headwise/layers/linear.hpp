// SPDX-License-Identifier: MIT
// Linear<T>: y = x W^T + b over the last axis, owning its parameters and their gradients.
#pragma once

#include <cmath>        // std::sqrt
#include <cstddef>      // std::size_t
#include <stdexcept>    // std::logic_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::conditional_t, std::is_const_v, std::is_same_v
#include <utility>      // std::move, std::pair
#include <vector>       // std::vector

#include "../bf16.hpp"
#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../detail/precision_check.hpp"
#include "../error.hpp"
#include "../init.hpp"
#include "../ops/gemm_bf16.hpp"
#include "../ops/linear.hpp"
#include "../precision.hpp"
#include "../random.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "module.hpp"
#include "uninitialized.hpp"
#include "weight_matrix.hpp"

namespace headwise {

/// A fully connected layer as torch.nn.Linear: weight [out, in], optional bias [out],
/// y = x W^T + b applied to the last axis of an input of any rank >= 1 ([..., in] -> [..., out]).
/// Stateless between calls: backward takes the forward's input again, so any number of forwards
/// may precede their backwards. Gradients accumulate until zero_grad(). Follows the module
/// contract (layers/module.hpp): parameters "weight" and "bias" (if any) under torch's names;
/// in float, training and evaluation mode compute the same (in bf16 they differ only in which
/// bf16 weight the product reads: see with_precision).
template <class T>
class Linear : public Module<Linear<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    using value_type = T;
    static constexpr const char* kName = "headwise::Linear";

    /// PyTorch's initialisation (nn.Linear.reset_parameters): weight by kaiming_uniform_ with
    /// a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), then bias U(-1/sqrt(in), 1/sqrt(in)), both
    /// drawn from `rng` in that order. Gradients start at zero. Throws std::invalid_argument
    /// unless both sizes are positive.
    template <class Rng>
    Linear(Index in_features, Index out_features, bool bias, Rng& rng);
    /// The same shapes with the weight and bias unwritten (load them before use) and the
    /// gradients allocated on first use (see headwise::uninitialized): for a model that loads
    /// its weights from a checkpoint. The gradients, once allocated, start at zero.
    Linear(Index in_features, Index out_features, bool bias, uninitialized_t);

    /// y[..., out] = x[..., in] W^T + b.
    Tensor<T> forward(TensorView<const T> x) const;
    /// The same into a caller buffer y[..., out] (overwritten; must not overlap x).
    void forward_into(TensorView<const T> x, TensorView<T> y) const;

    /// Given the forward's input x[..., in] and dy[..., out] = dLoss/dy, returns
    /// dx[..., in] = dy W and ADDS dy^T x to grad_weight() and sum(dy) to grad_bias().
    Tensor<T> backward(TensorView<const T> x, TensorView<const T> dy);
    /// The same, ADDING dx into the caller buffer dx[..., in] (zero it first, or let a residual
    /// branch's gradient sum into it).
    void backward_into(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx);

    /// with_precision(Precision::bf16[, FloatWeights]) (Module: Linear<float> only): the products
    /// in bf16 with float accumulation, the bias and the outputs float. In evaluation mode
    /// forward rounds its input to bf16 and multiplies by the weight's bf16 copy (WeightMatrix);
    /// in training mode it is mixed-precision training as PyTorch's autocast on CPU: forward
    /// rounds the CURRENT float weight to bf16 on each call, and backward computes
    /// dx = bf16(dy) bf16(W) and adds bf16(dy)^T bf16(x) to grad_weight() and sum(dy) to
    /// grad_bias(), products accumulated in float (ops::linear_backward_bf16). Memory: float
    /// 4 (out in + out); bf16 keep 6 out in + 4 out; bf16 release 2 out in + 4 out. Released,
    /// forward and forward_into still work (bit for bit as keep); backward, backward_into,
    /// weight(), grad_weight(), take_weight() and the parameter walks throw std::logic_error
    /// naming the call ("headwise::Linear::visit_parameters" for parameters(), state_dict(),
    /// load_state_dict(), zero_grad(), parameter_count()); bias(), grad_bias(), take_bias()
    /// and memory_bytes() work. See Module::with_precision.

    Index in_features() const noexcept { return in_features_; }
    Index out_features() const noexcept { return out_features_; }
    bool has_bias() const noexcept { return has_bias_; }

    /// Parameters and gradients as views: values may be changed in place, shapes may not.
    /// Without bias, bias() and grad_bias() are empty (shape [0]). On a layer constructed
    /// uninitialized, the first call that needs the gradients (these accessors, parameters(),
    /// backward) allocates them; that first call is not safe concurrently with another.
    /// weight() and grad_weight() throw std::logic_error when the float weights are released
    /// (see with_precision).
    TensorView<T> weight() {
        check_weights("headwise::Linear::weight");
        return weight_.value().view();
    }
    TensorView<const T> weight() const {
        check_weights("headwise::Linear::weight");
        return weight_.value().view();
    }
    TensorView<T> bias() noexcept { return bias_.view(); }
    TensorView<const T> bias() const noexcept { return bias_.view(); }
    TensorView<T> grad_weight() {
        check_weights("headwise::Linear::grad_weight");
        return weight_.grad().view();
    }
    TensorView<const T> grad_weight() const {
        check_weights("headwise::Linear::grad_weight");
        return mutable_weight().grad().view();
    }
    TensorView<T> grad_bias() { return bias_grad().view(); }
    TensorView<const T> grad_bias() const { return const_cast<Linear&>(*this).bias_grad().view(); }
    /// Whether the gradient buffers exist (always, unless constructed uninitialized and not
    /// yet asked for them).
    bool has_grad_buffers() const noexcept { return weight_.has_grad(); }

    /// Replace the weight [out, in] or the bias [out] by `w`, moved in without a copy (for a
    /// loader that owns the checkpoint's tensors). Throws shape_error naming the function and
    /// the argument, before any change, unless `w` has the parameter's shape (take_bias: a
    /// layer with a bias). Views of the replaced parameter (from weight(), parameters(), ...)
    /// no longer refer to the layer's. take_weight throws std::logic_error when the float
    /// weights are released (see with_precision).
    void take_weight(Tensor<T>&& w) {
        check_weights("headwise::Linear::take_weight");
        detail::check_shape("headwise::Linear::take_weight", "weight", w.shape(), weight_.shape());
        weight_.replace(std::move(w));
    }
    void take_bias(Tensor<T>&& b) {
        if (!has_bias_)
            throw_invalid_argument("headwise::Linear::take_bias", "bias",
                                   "a layer constructed with a bias", "a layer without one");
        detail::check_shape("headwise::Linear::take_bias", "bias", b.shape(), bias_.shape());
        bias_ = std::move(b);
    }

    /// "weight" [out, in] and "bias" [out] (if any), in torch's order (the module contract).
    template <class D>
    void declare(D& d) {
        d.parameter("weight", weight_);
        if (has_bias_) d.parameter("bias", bias_, grad_bias_);
    }

private:
    /// `value` if it is positive; otherwise throws naming the constructor and `argument`.
    static Index checked_features(const char* argument, Index value) {
        if (value <= 0)
            throw_invalid_argument("headwise::Linear::Linear", argument, "must be positive",
                                   std::to_string(value));
        return value;
    }
    Shape output_shape(const Shape& input) const {
        Shape s = input;
        s[s.rank() - 1] = out_features_;
        return s;
    }
    /// Throws std::logic_error naming `function` when the float weights are released.
    void check_weights(const char* function) const {
        detail::check_float_weights(function, weight_.released(),
                                    "this call needs the float weights (the layer is "
                                    "inference-only)");
    }
    void forward_unchecked(TensorView<const T> x, TensorView<T> y) const;
    void backward_unchecked(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx);
    WeightMatrix<T>& mutable_weight() const { return const_cast<WeightMatrix<T>&>(weight_); }
    /// The bias gradient, allocated (zero) on first use.
    Tensor<T>& bias_grad() {
        if (grad_bias_.shape() != bias_.shape()) grad_bias_ = Tensor<T>(bias_.shape());
        return grad_bias_;
    }

    Index in_features_;
    Index out_features_;
    bool has_bias_;
    WeightMatrix<T> weight_;  // [out, in], its gradient and its copy in another format
    Tensor<T> bias_;          // [out], or [0] without bias
    Tensor<T> grad_bias_;     // [out], or [0] without bias or until allocated
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
template <class Rng>
Linear<T>::Linear(Index in_features, Index out_features, bool bias, Rng& rng)
    : in_features_(checked_features("in_features", in_features)),
      out_features_(checked_features("out_features", out_features)),
      has_bias_(bias),
      weight_(Shape{out_features, in_features}),
      bias_(Shape{bias ? out_features : 0}),
      grad_bias_(Shape{bias ? out_features : 0}) {
    kaiming_uniform_(weight_.value(), std::sqrt(5.0), rng);
    if (has_bias_) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(in_features_));
        uniform_(bias_, -bound, bound, rng);
    }
}

template <class T>
Linear<T>::Linear(Index in_features, Index out_features, bool bias, uninitialized_t)
    : in_features_(checked_features("in_features", in_features)),
      out_features_(checked_features("out_features", out_features)),
      has_bias_(bias),
      weight_(WeightMatrix<T>::uninitialized(Shape{out_features, in_features})),
      bias_(Tensor<T>::uninitialized(Shape{bias ? out_features : 0})),
      grad_bias_(Shape{0}) {}

template <class T>
Tensor<T> Linear<T>::forward(TensorView<const T> x) const {
    detail::check_last_dim("headwise::Linear::forward", "input", x.shape(), in_features_);
    // [..., out]; every element is written (bias, then the product added), so no zero fill.
    Tensor<T> y = Tensor<T>::uninitialized(output_shape(x.shape()));
    forward_unchecked(x, y);
    return y;
}

template <class T>
void Linear<T>::forward_into(TensorView<const T> x, TensorView<T> y) const {
    constexpr const char* fn = "headwise::Linear::forward_into";
    detail::check_last_dim(fn, "input", x.shape(), in_features_);
    detail::check_shape(fn, "output", y.shape(), output_shape(x.shape()));
    forward_unchecked(x, y);
}

template <class T>
void Linear<T>::forward_unchecked(TensorView<const T> x, TensorView<T> y) const {
    // x [..., in] viewed as X [N, in]; y [..., out] as Y [N, out]; training mode multiplies by
    // the current weight (an optimiser changes it every step), evaluation by its copy
    weight_.forward(x.matrix(), has_bias_ ? bias_.data() : nullptr, y.matrix(),
                    this->is_training());
}

template <class T>
Tensor<T> Linear<T>::backward(TensorView<const T> x, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::Linear::backward";
    weight_.check_trainable(fn);
    check_weights(fn);
    detail::check_last_dim(fn, "input", x.shape(), in_features_);
    detail::check_shape(fn, "grad_output", dy.shape(), output_shape(x.shape()));
    Tensor<T> dx(x.shape());  // [..., in], zero: backward_unchecked accumulates
    backward_unchecked(x, dy, dx);
    return dx;
}

template <class T>
void Linear<T>::backward_into(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx) {
    constexpr const char* fn = "headwise::Linear::backward_into";
    weight_.check_trainable(fn);
    check_weights(fn);
    detail::check_last_dim(fn, "input", x.shape(), in_features_);
    detail::check_shape(fn, "grad_output", dy.shape(), output_shape(x.shape()));
    detail::check_shape(fn, "grad_input", dx.shape(), x.shape());
    backward_unchecked(x, dy, dx);
}

template <class T>
void Linear<T>::backward_unchecked(TensorView<const T> x, TensorView<const T> dy,
                                   TensorView<T> dx) {
    // x [..., in] as X [N, in]; dy [..., out] as dY [N, out]; dx [..., in] as dX [N, in]
    weight_.backward(x.matrix(), dy.matrix(), dx.matrix(),
                     has_bias_ ? bias_grad().data() : nullptr);
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_LINEAR_TEMPLATES(C, F, T) C(class, Linear<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_LINEAR_TEMPLATES);
