// SPDX-License-Identifier: MIT
// WeightMatrix<T>: a weight matrix, its gradient and the format its products read it in.
#pragma once

#include <cstddef>      // std::size_t
#include <type_traits>  // std::is_same_v
#include <utility>      // std::move
#include <vector>       // std::vector

#include "../bf16.hpp"
#include "../config.hpp"
#include "../ops/gemm_bf16.hpp"
#include "../ops/linear.hpp"
#include "../precision.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise {

/// The holder of one weight matrix that a module multiplies by (Linear's weight,
/// MultiheadAttention's in- and out-projection weights): the float master weight, its gradient,
/// and the copy in the format the products read (Precision::bf16: a bf16 copy). Every module
/// that multiplies by weights keeps them in these, so that a format is implemented here once:
/// the module contract (layers/module.hpp) switches every holder of a module tree
/// (with_precision), counts their bytes (memory_bytes) and refreshes their copies (eval(),
/// load_state_dict()), and the products below dispatch on the format in one place.
///
/// States: float32 (master only); bf16 keep (master + copy; the copy is taken by
/// set_precision, on every switch to evaluation mode and after every write through the module
/// contract: refresh()); bf16 released (the copy only: master and gradient freed, shape()
/// still the logical one). The logical shape may be any rank (MultiheadAttention's in-projection
/// is one flat block that its declaration views as one or three matrices).
template <class T>
class WeightMatrix {
public:
    WeightMatrix() = default;
    /// A zero weight of `shape` and a zero gradient.
    explicit WeightMatrix(const Shape& shape) : shape_(shape), value_(shape), grad_(shape) {}
    /// A weight of `shape` left unwritten (a loader fills it) and the gradient allocated on
    /// first use (grad()).
    static WeightMatrix uninitialized(const Shape& shape) {
        WeightMatrix w;
        w.shape_ = shape;
        w.value_ = Tensor<T>::uninitialized(shape);
        w.grad_ = Tensor<T>(Shape{0});
        return w;
    }

    /// The logical shape (also after a release).
    const Shape& shape() const noexcept { return shape_; }
    Index numel() const noexcept { return shape_.numel(); }
    Precision precision() const noexcept { return precision_; }
    /// Whether set_precision(bf16, release) freed the float master and its gradient.
    bool released() const noexcept { return released_; }

    /// The float master weight (empty once released: callers check released() first).
    Tensor<T>& value() noexcept { return value_; }
    const Tensor<T>& value() const noexcept { return value_; }
    /// The gradient, allocated (zero) on first use; empty once released.
    Tensor<T>& grad() {
        if (!released_ && grad_.shape() != shape_) grad_ = Tensor<T>(shape_);
        return grad_;
    }
    /// Whether the gradient buffer exists.
    bool has_grad() const noexcept { return !released_ && grad_.shape() == shape_; }
    /// The bf16 copy (Precision::bf16), else nullptr.
    const BFloat16* bf16() const noexcept {
        return precision_ == Precision::bf16 ? copy_.data() : nullptr;
    }

    /// Replaces the master by `w` (shape() checked by the caller), moved in; the copy follows.
    void replace(Tensor<T>&& w) {
        value_ = std::move(w);
        refresh();
    }

    /// The switch of with_precision, its arguments checked by the caller (detail::
    /// check_precision: bf16 only for float, keep refused once released).
    void set_precision(Precision precision, FloatWeights float_weights) {
        if constexpr (std::is_same_v<T, float>) {
            if (precision == Precision::float32) {
                if (released_) {  // the bf16 values widened (exact): the rounding stays
                    Tensor<T> w = Tensor<T>::uninitialized(shape_);
                    to_float(copy_.data(), w.data(), w.numel());
                    value_ = std::move(w);
                    grad_ = Tensor<T>(shape_);  // zero
                    released_ = false;
                }
                copy_ = std::vector<BFloat16>();
            } else if (!released_) {  // released: the copy is all there is, nothing to do
                copy_.resize(static_cast<std::size_t>(numel()));
                precision_ = precision;
                refresh();
                if (float_weights == FloatWeights::release) {  // the storage, not just the size
                    value_ = Tensor<T>(Shape{0});
                    grad_ = Tensor<T>(Shape{0});
                    released_ = true;
                }
            }
        }
        precision_ = precision;
    }

    /// The copy taken anew from the master (bf16, not released); nothing otherwise.
    void refresh() {
        if constexpr (std::is_same_v<T, float>)
            if (precision_ == Precision::bf16 && !released_)
                to_bf16(value_.data(), copy_.data(), value_.numel());
    }

    /// Bytes as stored: the master (unless released) and the copy; the gradient not counted.
    std::size_t memory_bytes() const noexcept {
        return sizeof(T) * static_cast<std::size_t>(value_.numel()) +
               sizeof(BFloat16) * copy_.size();
    }

    /// Y [N, out] = X [N, in] W^T + b for a weight of shape [out, in], in the holder's format.
    /// bf16: products in bf16 with float accumulation, the buffers the call's own (const calls
    /// may run at the same time); `current` (training) rounds the master as it is now, since an
    /// optimiser changes it every step, else the copy (which a released weight has alone).
    void forward(ConstMatrixRef<T> X, const T* bias, MatrixRef<T> Y, bool current) const {
        if constexpr (std::is_same_v<T, float>) {
            if (precision_ == Precision::bf16) {
                ops::Bf16LinearWorkspace workspace;
                std::vector<BFloat16> rounded;
                const Index out = shape_[0], in = shape_[1];
                const ops::ConstBf16Matrix w =
                    current && !released_ ? ops::rounded_to_bf16(value_.matrix(), rounded)
                                          : ops::ConstBf16Matrix(copy_.data(), out, in);
                ops::linear_forward_bf16(X, w, bias, Y, workspace);
                return;
            }
        }
        ops::linear_forward<T>(X, value_.matrix(), bias, Y);
    }

    /// Backward of forward: dX [N, in] += dY W, grad() += dY^T X, grad_bias (if not null) +=
    /// sum(dY). bf16: the operands rounded to bf16, products accumulated in float, gradients
    /// float (mixed precision). Needs the master (the caller refuses a released weight).
    void backward(ConstMatrixRef<T> X, ConstMatrixRef<T> dY, MatrixRef<T> dX, T* grad_bias) {
        Tensor<T>& g = grad();
        if constexpr (std::is_same_v<T, float>) {
            if (precision_ == Precision::bf16) {
                ops::Bf16BackwardWorkspace workspace;
                ops::linear_backward_bf16(X, value_.matrix(), dY, dX, g.matrix(), grad_bias,
                                          workspace);
                return;
            }
        }
        ops::linear_backward<T>(X, value_.matrix(), dY, dX, g.matrix(), grad_bias);
    }

private:
    Shape shape_{0, 0};
    Precision precision_ = Precision::float32;
    bool released_ = false;
    Tensor<T> value_{Shape{0, 0}};  // the float master; [0] once released
    Tensor<T> grad_{Shape{0, 0}};   // its gradient; allocated on first use; [0] once released
    std::vector<BFloat16> copy_;    // bf16 copy (Precision::bf16), else empty
};

}  // namespace headwise
