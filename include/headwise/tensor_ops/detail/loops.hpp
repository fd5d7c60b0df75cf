// SPDX-License-Identifier: MIT
// What tensor_ops/ builds on: the element loops, index walks and message helpers its functions
// share (namespace detail, as every header of this folder).
#pragma once

#include <Eigen/Core>

#include <algorithm>    // std::copy_n
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v, std::remove_const_t
#include <vector>       // std::vector

#include "../../config.hpp"
#include "../../detail/tensor_like.hpp"
#include "../../error.hpp"
#include "../../ops/gemm.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "axis.hpp"

namespace headwise::detail {

// ---- tensor_ops/concat.hpp ----------------------------------------------------------------------

/// "[2, *, 4]": the shape with the free axis starred.
inline std::string shape_with_free_axis(const Shape& shape, int axis) {
    std::string s = "[";
    for (int a = 0; a < shape.rank(); ++a) {
        if (a) s += ", ";
        s += a == axis ? std::string("*") : std::to_string(shape[a]);
    }
    return s + "]";
}

// ---- tensor_ops/elementwise.hpp -----------------------------------------------------------------

enum class ElementwiseOp { add, sub, mul, div, rsub, rdiv };

/// The flat data of a view as an Eigen column array (no copy; views need not be aligned).
template <class T>
Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> flat_array(TensorView<const T> v) {
    return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v.data(), v.numel());
}
template <class T>
Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> flat_array(TensorView<T> v) {
    return Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(v.data(), v.numel());
}

/// out = a (op) b elementwise; out may alias a or b exactly.
template <class T>
void elementwise_into(ElementwiseOp op, TensorView<const T> a, TensorView<const T> b,
                      TensorView<T> out) {
    const auto A = flat_array(a);
    const auto B = flat_array(b);
    auto O = flat_array(out);
    switch (op) {
        case ElementwiseOp::add:
            O = A + B;
            break;
        case ElementwiseOp::sub:
            O = A - B;
            break;
        case ElementwiseOp::mul:
            O = A * B;
            break;
        case ElementwiseOp::div:
            O = A / B;
            break;
        case ElementwiseOp::rsub:
            O = B - A;
            break;
        case ElementwiseOp::rdiv:
            O = B / A;
            break;
    }
}

/// out = a (op) s elementwise (rsub: s - a, rdiv: s / a); out may alias a.
template <class T>
void elementwise_into(ElementwiseOp op, TensorView<const T> a, T s, TensorView<T> out) {
    const auto A = flat_array(a);
    auto O = flat_array(out);
    switch (op) {
        case ElementwiseOp::add:
            O = A + s;
            break;
        case ElementwiseOp::sub:
            O = A - s;
            break;
        case ElementwiseOp::mul:
            O = A * s;
            break;
        case ElementwiseOp::div:
            O = A / s;
            break;
        case ElementwiseOp::rsub:
            O = s - A;
            break;
        case ElementwiseOp::rdiv:
            O = s / A;
            break;
    }
}

template <class X, class Y>
Tensor<scalar_t<X>> elementwise(const char* function, ElementwiseOp op, const X& a, const Y& b) {
    using T = scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    static_assert(std::is_same_v<T, scalar_t<Y>>,
                  "headwise: both tensors of an elementwise operation must hold the same scalar "
                  "type; convert one of them first");
    const TensorView<const T> A = const_view(a);
    const TensorView<const T> B = const_view(b);
    check_shape(function, "b", B.shape(), A.shape());
    Tensor<T> out(A.shape());  // [A.shape]
    elementwise_into<T>(op, A, B, out.view());
    return out;
}

template <class X>
Tensor<scalar_t<X>> elementwise(ElementwiseOp op, const X& a, scalar_t<X> s) {
    using T = scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    const TensorView<const T> A = const_view(a);
    Tensor<T> out(A.shape());  // [A.shape]
    elementwise_into<T>(op, A, s, out.view());
    return out;
}

template <class X, class Y>
X& elementwise_assign(const char* function, ElementwiseOp op, X& a, const Y& b) {
    using T = scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    static_assert(std::is_same_v<T, scalar_t<Y>>,
                  "headwise: both tensors of an elementwise operation must hold the same scalar "
                  "type; convert one of them first");
    const TensorView<T> A = mutable_view(a);
    const TensorView<const T> B = const_view(b);
    check_shape(function, "b", B.shape(), A.shape());
    elementwise_into<T>(op, A, B, A);
    return a;
}

template <class X>
X& elementwise_assign(ElementwiseOp op, X& a, scalar_t<X> s) {
    using T = scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    const TensorView<T> A = mutable_view(a);
    elementwise_into<T>(op, A, s, A);
    return a;
}

// ---- tensor_ops/matmul.hpp ----------------------------------------------------------------------

/// C[m, n] = op(A) op(B) into existing memory; C must not overlap A or B.
template <class T>
void matmul_into(const T* a, Index a_rows, Index a_cols, bool transpose_a, const T* b, Index b_rows,
                 Index b_cols, bool transpose_b, T* c) {
    const MatrixMap<const T> A(a, a_rows, a_cols);
    const MatrixMap<const T> B(b, b_rows, b_cols);
    MatrixMap<T> C(c, transpose_a ? a_cols : a_rows, transpose_b ? b_rows : b_cols);
    // The library's one GEMM reads A^T and B^T in place: no transposed copy.
    ops::gemm<T>(T(1), A, transpose_a ? ops::Op::transpose : ops::Op::none, B,
                 transpose_b ? ops::Op::transpose : ops::Op::none, T(0), C);
}

/// "[m, k]" or "[k, m]" with the known extents written in.
inline std::string matrix_pattern(const std::string& batch, const std::string& rows,
                                  const std::string& cols, bool transposed) {
    return "[" + batch + (transposed ? cols + ", " + rows : rows + ", " + cols) + "]";
}

// ---- tensor_ops/permute.hpp ---------------------------------------------------------------------

inline std::string axes_string(const std::vector<int>& axes) {
    std::string s = "[";
    for (std::size_t i = 0; i < axes.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(axes[i]);
    }
    return s + "]";
}

/// Writes the permuted copy of `in` (shape `shape`) to `out`, which must not overlap it.
/// `axes` is already normalised to [0, rank) and checked to be a permutation.
template <class T>
void permute_into(const T* in, const Shape& shape, const int* axes, T* out) {
    const int rank = shape.rank();
    const Index numel = shape.numel();
    if (numel == 0) return;
    if (rank == 0) {
        out[0] = in[0];
        return;
    }
    // Row-major strides of the input, then the input stride of each output axis.
    Index in_stride[Shape::kMaxRank];
    Index stride = 1;
    for (int a = rank - 1; a >= 0; --a) {
        in_stride[a] = stride;
        stride *= shape[a];
    }
    Index out_shape[Shape::kMaxRank];
    Index src_stride[Shape::kMaxRank];
    for (int i = 0; i < rank; ++i) {
        out_shape[i] = shape[axes[i]];
        src_stride[i] = in_stride[axes[i]];
    }
    // Walk the output in order, one row of its last axis at a time, keeping the matching input
    // offset with an odometer over the leading output axes (no division per element). When the
    // last axis stays last, as in [B, L, H, D] <-> [B, H, L, D], each row is one contiguous copy.
    const Index inner = out_shape[rank - 1];
    const Index inner_stride = src_stride[rank - 1];
    const Index rows = numel / inner;
    Index counter[Shape::kMaxRank] = {};
    Index src = 0;
    for (Index r = 0; r < rows; ++r) {
        const T* s = in + src;
        T* d = out + r * inner;
        if (inner_stride == 1)
            std::copy_n(s, inner, d);
        else
            for (Index j = 0; j < inner; ++j) d[j] = s[j * inner_stride];
        for (int a = rank - 2; a >= 0; --a) {
            src += src_stride[a];
            if (++counter[a] < out_shape[a]) break;
            src -= src_stride[a] * out_shape[a];
            counter[a] = 0;
        }
    }
}

// ---- tensor_ops/reduce.hpp ----------------------------------------------------------------------

enum class Reduction { sum, mean, max };

template <class T>
Tensor<T> reduce_axis(const char* function, Reduction op, TensorView<const T> x, int axis,
                      bool keepdim) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    const int ax = checked_axis(function, "axis", x.shape(), axis);
    const AxisSplit s = split_at(x.shape(), ax);  // x seen as [outer, extent, inner]
    if (op != Reduction::sum && s.extent == 0)
        throw_invalid_argument(function, "x",
                               "must have a non-zero extent along axis " + std::to_string(ax),
                               x.shape().str());

    std::vector<Index> dims;
    for (int a = 0; a < x.rank(); ++a)
        if (a != ax || keepdim) dims.push_back(a == ax ? 1 : x.shape()[a]);
    Tensor<T> out{Shape(dims)};  // [outer, inner] laid out as x.shape without (or with 1 at) axis
    if (out.numel() == 0) return out;
    if (s.extent == 0) return out;  // an empty sum: zeros

    MatrixMap<T> O(out.data(), s.outer, s.inner);  // [outer, inner]
    if (s.inner == 1) {
        // Reducing the last axis (or one followed by extent-1 axes): one row-wise reduction of
        // the [outer, extent] matrix.
        const MatrixMap<const T> M(x.data(), s.outer, s.extent);  // [outer, extent]
        switch (op) {
            case Reduction::sum:
                O.col(0) = M.rowwise().sum();
                break;
            case Reduction::mean:
                O.col(0) = M.rowwise().mean();
                break;
            case Reduction::max:
                O.col(0) = M.rowwise().maxCoeff();
                break;
        }
        return out;
    }
    for (Index o = 0; o < s.outer; ++o) {
        // Slab o is an [extent, inner] matrix; reduce its columns into row o of the output.
        const MatrixMap<const T> M(x.data() + o * s.extent * s.inner, s.extent, s.inner);
        switch (op) {
            case Reduction::sum:
                O.row(o) = M.colwise().sum();
                break;
            case Reduction::mean:
                O.row(o) = M.colwise().mean();
                break;
            case Reduction::max:
                O.row(o) = M.colwise().maxCoeff();
                break;
        }
    }
    return out;
}

}  // namespace headwise::detail
