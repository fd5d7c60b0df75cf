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

    /// Precision::bf16 (Linear<float> only): the products in bf16 with float accumulation, the
    /// bias and the outputs float. with_precision takes a bf16 copy of the weight, here.
    /// In evaluation mode forward rounds its input to bf16 and multiplies by that copy, which
    /// eval() (or train(false), or a parent's eval()) takes anew; after changing the weight in
    /// evaluation mode, call with_precision(Precision::bf16) again.
    /// In training mode it is mixed-precision training as PyTorch's autocast on CPU: the float
    /// weight is the master weight (optimisers update it as in float); forward rounds the
    /// CURRENT float weight to bf16 on each call, so the copy is never stale there, and backward
    /// computes dx = bf16(dy) bf16(W) and adds bf16(dy)^T bf16(x) to grad_weight() and sum(dy)
    /// to grad_bias(), products accumulated in float, gradients float (ops::linear_backward_bf16).
    /// The float weight, bias and gradients stay as they are (parameters(), state_dict(),
    /// optimisers built on them keep working), so the copy adds half the weight's bytes
    /// (memory_bytes()). Precision::float32 drops the copy. Throws std::invalid_argument for
    /// bf16 on Linear<double>, or a value that is no Precision (FloatWeights) enumerator.
    ///
    /// FloatWeights::release (with bf16; inference only): the copy is taken as above, then the
    /// float weight and its gradient buffer are freed, so memory_bytes() counts 2 bytes per
    /// weight (exactly half of float without bias); the bias and its gradient stay float. From
    /// then on, per call:
    ///   forward, forward_into   work, in either mode: they multiply by the bf16 copy, which
    ///                           equals the rounded float weight a keep-mode module would
    ///                           multiply by (nothing can change it), so results are those of
    ///                           keep, bit for bit
    ///   train(), eval()         work (switch the mode; no copy is taken anew)
    ///   backward, backward_into, weight(), grad_weight(), take_weight(), parameters(),
    ///   state_dict(), grad_dict(), load_state_dict(), zero_grad(), parameter_count()
    ///                           throw std::logic_error naming the call (the parameter views of
    ///                           the module contract name "headwise::Linear::visit_parameters")
    ///                           before anything changes
    ///   bias(), grad_bias(), take_bias(), memory_bytes()   work (has_grad_buffers() is false)
    ///   with_precision(bf16, release)   does nothing more; with_precision(bf16, keep) throws
    ///                           std::logic_error
    ///   with_precision(float32) the float weight widened exactly from the bf16 copy and a zero
    ///                           weight gradient: a trainable float layer again, whose weight
    ///                           keeps the bf16 rounding (it is not undone)
    /// Views of the weight or its gradient taken before the release (weight(), parameters(), an
    /// optimiser's) dangle afterwards, as after take_weight().
    Linear& with_precision(Precision precision, FloatWeights float_weights = FloatWeights::keep);
    Precision precision() const noexcept { return precision_; }
    /// Whether with_precision(Precision::bf16, FloatWeights::release) freed the float weight.
    bool float_weights_released() const noexcept { return released_; }
    /// Training or evaluation mode (Module::train), also when a parent module switches it. In
    /// Precision::bf16, switching to evaluation mode takes a new bf16 copy of the weight, so that
    /// evaluation after training steps reads the current weight (not with released float
    /// weights: the copy is all there is).
    void train(bool on = true) {
        Module<Linear<T>, T>::train(on);
        if (!on) refresh_bf16_copy();
    }
    void eval() { train(false); }
    /// Bytes of the parameters as stored: the float weight (unless released), its bf16 copy in
    /// Precision::bf16 (2 bytes per element) and the bias; gradients not counted. Float:
    /// 4 (out in + out); bf16 keep: 6 out in + 4 out; bf16 release: 2 out in + 4 out.
    std::size_t memory_bytes() const noexcept {
        return sizeof(T) * static_cast<std::size_t>(weight_.numel() + bias_.numel()) +
               sizeof(BFloat16) * weight_bf16_.size();
    }

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
        return weight_.view();
    }
    TensorView<const T> weight() const {
        check_weights("headwise::Linear::weight");
        return weight_.view();
    }
    TensorView<T> bias() noexcept { return bias_.view(); }
    TensorView<const T> bias() const noexcept { return bias_.view(); }
    TensorView<T> grad_weight() {
        check_weights("headwise::Linear::grad_weight");
        return grads().first.view();
    }
    TensorView<const T> grad_weight() const {
        check_weights("headwise::Linear::grad_weight");
        return grads().first.view();
    }
    TensorView<T> grad_bias() { return grads().second.view(); }
    TensorView<const T> grad_bias() const { return grads().second.view(); }
    /// Whether the gradient buffers exist (always, unless constructed uninitialized and not
    /// yet asked for them).
    bool has_grad_buffers() const noexcept { return grad_weight_.numel() > 0; }

    /// Replace the weight [out, in] or the bias [out] by `w`, moved in without a copy (for a
    /// loader that owns the checkpoint's tensors). Throws shape_error naming the function and
    /// the argument, before any change, unless `w` has the parameter's shape (take_bias: a
    /// layer with a bias). Views of the replaced parameter (from weight(), parameters(), ...)
    /// no longer refer to the layer's. take_weight throws std::logic_error when the float
    /// weights are released (see with_precision).
    void take_weight(Tensor<T>&& w) {
        check_weights("headwise::Linear::take_weight");
        detail::check_shape("headwise::Linear::take_weight", "weight", w.shape(), weight_.shape());
        weight_ = std::move(w);
    }
    void take_bias(Tensor<T>&& b) {
        if (!has_bias_)
            throw_invalid_argument("headwise::Linear::take_bias", "bias",
                                   "a layer constructed with a bias", "a layer without one");
        detail::check_shape("headwise::Linear::take_bias", "bias", b.shape(), bias_.shape());
        bias_ = std::move(b);
    }

    /// "weight" [out, in] and "bias" [out] (if any) with their gradients, in torch's order.
    template <class Self, class Visit>
    static void visit_parameters(Self& m, Visit&& visit) {
        m.check_weights("headwise::Linear::visit_parameters");
        m.grads();
        // The gradients of a const layer are visited const, as its values are.
        using Grad = std::conditional_t<std::is_const_v<Self>, const Tensor<T>&, Tensor<T>&>;
        Grad grad_weight = m.grad_weight_, grad_bias = m.grad_bias_;
        visit("weight", m.weight_.view(), grad_weight.view());
        if (m.has_bias_) visit("bias", m.bias_.view(), grad_bias.view());
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
        detail::check_float_weights(
            function, released_, "this call needs the float weights (the layer is inference-only)");
    }
    /// The weight rounded into its bf16 copy again, in Precision::bf16 (with a float weight).
    void refresh_bf16_copy() {
        if constexpr (std::is_same_v<T, float>)
            if (precision_ == Precision::bf16 && !released_)
                to_bf16(weight_.data(), weight_bf16_.data(), weight_.numel());
    }
    void forward_unchecked(TensorView<const T> x, TensorView<T> y) const;
    void backward_unchecked(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx);
    /// The gradient buffers, allocated (zero) if they are not yet.
    /// With released float weights only the bias's (the weight's is gone for good).
    std::pair<Tensor<T>&, Tensor<T>&> grads() const {
        if (released_) {
            if (grad_bias_.shape() != bias_.shape()) grad_bias_ = Tensor<T>(bias_.shape());
        } else if (grad_weight_.numel() == 0) {
            grad_weight_ = Tensor<T>(weight_.shape());
            grad_bias_ = Tensor<T>(bias_.shape());
        }
        return {grad_weight_, grad_bias_};
    }

    Index in_features_;
    Index out_features_;
    bool has_bias_;
    Precision precision_ = Precision::float32;
    bool released_ = false;              // weight_ and grad_weight_ freed (bf16, release)
    std::vector<BFloat16> weight_bf16_;  // [out, in] in bf16 mode, else empty
    Tensor<T> weight_;                   // [out, in]; [0, 0] when released
    Tensor<T> bias_;                     // [out], or [0] without bias
    // Mutable: a layer constructed uninitialized allocates them on first use, which may be a
    // const call (parameters() const, grad_dict()).
    mutable Tensor<T> grad_weight_;  // [out, in], or [0, 0] until allocated
    mutable Tensor<T> grad_bias_;    // [out], or [0] without bias or until allocated
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
      grad_weight_(Shape{out_features, in_features}),
      grad_bias_(Shape{bias ? out_features : 0}) {
    kaiming_uniform_(weight_, std::sqrt(5.0), rng);
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
      weight_(Tensor<T>::uninitialized(Shape{out_features, in_features})),
      bias_(Tensor<T>::uninitialized(Shape{bias ? out_features : 0})),
      grad_weight_(Shape{0, 0}),
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
Linear<T>& Linear<T>::with_precision(Precision precision, FloatWeights float_weights) {
    constexpr const char* fn = "headwise::Linear::with_precision";
    if (precision != Precision::float32 && precision != Precision::bf16)
        throw_invalid_argument(fn, "precision", "Precision::float32 or Precision::bf16",
                               std::to_string(static_cast<int>(precision)));
    if (float_weights != FloatWeights::keep && float_weights != FloatWeights::release)
        throw_invalid_argument(fn, "float_weights", "FloatWeights::keep or FloatWeights::release",
                               std::to_string(static_cast<int>(float_weights)));
    const Shape w_shape{out_features_, in_features_};
    if (precision == Precision::float32) {
        if constexpr (std::is_same_v<T, float>) {
            if (released_) {  // the bf16 values widened (exact): the rounding stays
                Tensor<T> w = Tensor<T>::uninitialized(w_shape);
                to_float(weight_bf16_.data(), w.data(), w.numel());
                Tensor<T> grad(w_shape);  // zero
                if (grad_bias_.shape() != bias_.shape()) grad_bias_ = Tensor<T>(bias_.shape());
                weight_ = std::move(w);
                grad_weight_ = std::move(grad);
                released_ = false;
            }
        }
        weight_bf16_ = std::vector<BFloat16>();
        precision_ = precision;
        return *this;
    }
    if constexpr (!std::is_same_v<T, float>) {
        throw_invalid_argument(fn, "precision", "Precision::float32 for a Linear<double>",
                               "Precision::bf16 (bf16 is for float modules)");
    } else {
        if (released_) {  // the copy is all there is: nothing to round, nothing to free
            if (float_weights == FloatWeights::keep)
                detail::throw_float_weights_released(
                    fn,
                    "FloatWeights::keep needs them (call with_precision(Precision::float32) "
                    "first to train again)");
            return *this;
        }
        const Index n = out_features_ * in_features_;
        std::vector<BFloat16> copy(static_cast<std::size_t>(n));
        to_bf16(weight_.data(), copy.data(), n);  // [out, in], rounded once
        weight_bf16_ = std::move(copy);
        precision_ = precision;
        if (float_weights == FloatWeights::release) {  // the storage itself, not just the size
            weight_ = Tensor<T>(Shape{0, 0});
            grad_weight_ = Tensor<T>(Shape{0, 0});
            released_ = true;
        }
    }
    return *this;
}

template <class T>
void Linear<T>::forward_unchecked(TensorView<const T> x, TensorView<T> y) const {
    if constexpr (std::is_same_v<T, float>) {
        if (precision_ == Precision::bf16) {
            // Products in bf16 with float accumulation; the buffers are the call's own, so
            // const forwards may run at the same time. Training: the current float weight,
            // rounded here (an optimiser changes it every step); evaluation, or a released
            // float weight (which nothing can change): the copy.
            ops::Bf16LinearWorkspace workspace;
            std::vector<BFloat16> current;
            const ops::ConstBf16Matrix w =
                this->is_training() && !released_
                    ? ops::rounded_to_bf16(weight_.matrix(), current)
                    : ops::ConstBf16Matrix(weight_bf16_.data(), out_features_, in_features_);
            ops::linear_forward_bf16(x.matrix(), w, has_bias_ ? bias_.data() : nullptr, y.matrix(),
                                     workspace);
            return;
        }
    }
    // x [..., in] viewed as X [N, in]; y [..., out] as Y [N, out]
    ops::linear_forward<T>(x.matrix(), weight_.matrix(), has_bias_ ? bias_.data() : nullptr,
                           y.matrix());
}

template <class T>
Tensor<T> Linear<T>::backward(TensorView<const T> x, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::Linear::backward";
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
    grads();
    if constexpr (std::is_same_v<T, float>) {
        if (precision_ == Precision::bf16) {  // mixed precision: bf16 products, float gradients
            ops::Bf16BackwardWorkspace workspace;
            ops::linear_backward_bf16(x.matrix(), weight_.matrix(), dy.matrix(), dx.matrix(),
                                      grad_weight_.matrix(),
                                      has_bias_ ? grad_bias_.data() : nullptr, workspace);
            return;
        }
    }
    ops::linear_backward<T>(x.matrix(), weight_.matrix(), dy.matrix(), dx.matrix(),
                            grad_weight_.matrix(), has_bias_ ? grad_bias_.data() : nullptr);
}

}  // namespace headwise
