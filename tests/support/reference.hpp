// SPDX-License-Identifier: MIT
// Reference implementations in plain double loops: the oracle the fast paths are tested against.
#pragma once

#include <algorithm>  // std::max
#include <cmath>      // std::exp, std::isinf
#include <cstddef>    // std::size_t
#include <limits>     // std::numeric_limits
#include <vector>     // std::vector

#include <headwise/tensor.hpp>

namespace headwise::test::reference {

/// A copy of `x` in double, so a float result can be compared with a double reference.
template <class T>
Tensor<double> to_double(TensorView<const T> x) {
    Tensor<double> y(x.shape());
    for (Index i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<double>(x.data()[i]);
    return y;
}

/// y[..., out] = x[..., in] W[out, in]^T + b[out]; an empty b means no bias.
inline Tensor<double> linear(TensorView<const double> x, TensorView<const double> W,
                             TensorView<const double> b) {
    const Index in = W.size(1), out = W.size(0), N = x.numel() / in;
    Shape shape = x.shape();
    shape[shape.rank() - 1] = out;
    Tensor<double> y(shape);  // [..., out]
    for (Index n = 0; n < N; ++n)
        for (Index o = 0; o < out; ++o) {
            double sum = b.empty() ? 0.0 : b[o];
            for (Index i = 0; i < in; ++i) sum += x[n * in + i] * W[o * in + i];
            y.data()[n * out + o] = sum;
        }
    return y;
}

/// Softmax over the last axis of S[..., C]: -infinity entries get 0, a row of only -infinity
/// gives zeros. Exponentials of the entries minus the row max, summed in double.
inline Tensor<double> softmax(TensorView<const double> S) {
    const Index C = S.rank() == 0 ? 1 : S.shape().back(), R = C == 0 ? 0 : S.numel() / C;
    Tensor<double> P(S.shape());  // [..., C]
    for (Index r = 0; r < R; ++r) {
        const double* s = S.data() + r * C;
        double* p = P.data() + r * C;
        double m = -std::numeric_limits<double>::infinity();
        for (Index c = 0; c < C; ++c) m = s[c] > m ? s[c] : m;
        if (std::isinf(m) && m < 0) continue;  // fully masked row: zeros
        double sum = 0.0;
        for (Index c = 0; c < C; ++c) sum += p[c] = std::exp(s[c] - m);
        for (Index c = 0; c < C; ++c) p[c] /= sum;
    }
    return P;
}

/// A copy of double values in T (rounded), to feed a float path the reference's inputs.
template <class T>
Tensor<T> from_double(TensorView<const double> x) {
    Tensor<T> y(x.shape());
    for (Index i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<T>(x.data()[i]);
    return y;
}

// ---- multi-indices -------------------------------------------------------------------------

/// Row-major multi-index of flat index `flat` in `shape`.
inline std::vector<Index> unravel(const Shape& shape, Index flat) {
    std::vector<Index> index(static_cast<std::size_t>(shape.rank()));
    for (int a = shape.rank() - 1; a >= 0; --a) {
        index[static_cast<std::size_t>(a)] = flat % shape[a];
        flat /= shape[a];
    }
    return index;
}

/// Row-major flat index of `index` in `shape`.
inline Index ravel(const Shape& shape, const std::vector<Index>& index) {
    Index flat = 0;
    for (int a = 0; a < shape.rank(); ++a)
        flat = flat * shape[a] + index[static_cast<std::size_t>(a)];
    return flat;
}

// ---- products ------------------------------------------------------------------------------

/// C[m, n] = op(A) op(B), op = transpose when the flag is set; the triple loop.
inline Tensor<double> matmul(TensorView<const double> A, TensorView<const double> B,
                             bool transpose_a = false, bool transpose_b = false) {
    const Index m = transpose_a ? A.size(1) : A.size(0);
    const Index k = transpose_a ? A.size(0) : A.size(1);
    const Index n = transpose_b ? B.size(0) : B.size(1);
    const Index lda = A.size(1), ldb = B.size(1);
    Tensor<double> C(Shape{m, n});  // [m, n]
    for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
            double sum = 0.0;
            for (Index p = 0; p < k; ++p) {
                const double a = transpose_a ? A[p * lda + i] : A[i * lda + p];
                const double b = transpose_b ? B[j * ldb + p] : B[p * ldb + j];
                sum += a * b;
            }
            C.data()[i * n + j] = sum;
        }
    return C;
}

/// C[N, m, n]: matmul of each pair of matrices along the leading axis.
inline Tensor<double> batched_matmul(TensorView<const double> A, TensorView<const double> B,
                                     bool transpose_a = false, bool transpose_b = false) {
    const Index N = A.size(0);
    const Index m = transpose_a ? A.size(2) : A.size(1);
    const Index n = transpose_b ? B.size(1) : B.size(2);
    Tensor<double> C(Shape{N, m, n});  // [N, m, n]
    for (Index b = 0; b < N; ++b) {
        const Tensor<double> Cb = matmul(A.slice(b), B.slice(b), transpose_a, transpose_b);
        for (Index i = 0; i < m * n; ++i) C.data()[b * m * n + i] = Cb.data()[i];
    }
    return C;
}

// ---- data movement -------------------------------------------------------------------------

/// out[i_0, ..., i_r] = x[j] with j[axes[d]] = i_d: walks the *input* and scatters (the fast
/// path walks the output and gathers). `axes` must be a permutation of 0..rank-1.
template <class T>
Tensor<T> permute(TensorView<const T> x, const std::vector<int>& axes) {
    std::vector<Index> dims;
    for (const int a : axes) dims.push_back(x.shape()[a]);
    const Shape out_shape(dims);
    Tensor<T> out(out_shape);
    std::vector<Index> out_index(axes.size());
    for (Index flat = 0; flat < x.numel(); ++flat) {
        const std::vector<Index> in_index = unravel(x.shape(), flat);
        for (std::size_t d = 0; d < axes.size(); ++d)
            out_index[d] = in_index[static_cast<std::size_t>(axes[d])];
        out.data()[ravel(out_shape, out_index)] = x.data()[flat];
    }
    return out;
}

/// The parts joined along `axis` (non-negative), element by element.
template <class T>
Tensor<T> concat(const std::vector<TensorView<const T>>& parts, int axis) {
    Shape out_shape = parts.at(0).shape();
    out_shape[axis] = 0;
    for (const auto& p : parts) out_shape[axis] += p.shape()[axis];
    Tensor<T> out(out_shape);
    Index offset = 0;  // where this part starts along `axis`
    for (const auto& p : parts) {
        for (Index flat = 0; flat < p.numel(); ++flat) {
            std::vector<Index> index = unravel(p.shape(), flat);
            index[static_cast<std::size_t>(axis)] += offset;
            out.data()[ravel(out_shape, index)] = p.data()[flat];
        }
        offset += p.shape()[axis];
    }
    return out;
}

// ---- reductions ----------------------------------------------------------------------------

enum class Reduce { sum, mean, max };

/// Sum, mean or max along `axis` (non-negative): every input element is folded into the output
/// element whose index is its own with that axis dropped (or set to 0 with keepdim).
inline Tensor<double> reduce(TensorView<const double> x, int axis, bool keepdim, Reduce op) {
    std::vector<Index> dims, reduced_dims;
    for (int a = 0; a < x.rank(); ++a) {
        if (a != axis) reduced_dims.push_back(x.shape()[a]);
        if (a != axis || keepdim) dims.push_back(a == axis ? 1 : x.shape()[a]);
    }
    const Shape reduced(reduced_dims);
    Tensor<double> out{Shape(dims)};
    const double start = op == Reduce::max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (Index i = 0; i < out.numel(); ++i) out.data()[i] = start;
    for (Index flat = 0; flat < x.numel(); ++flat) {
        std::vector<Index> index = unravel(x.shape(), flat);
        index.erase(index.begin() + axis);
        double& o = out.data()[ravel(reduced, index)];
        o = op == Reduce::max ? std::max(o, x.data()[flat]) : o + x.data()[flat];
    }
    if (op == Reduce::mean)
        for (Index i = 0; i < out.numel(); ++i)
            out.data()[i] /= static_cast<double>(x.shape()[axis]);
    return out;
}

/// Sum of every element.
inline double sum_all(TensorView<const double> x) {
    double sum = 0.0;
    for (Index i = 0; i < x.numel(); ++i) sum += x.data()[i];
    return sum;
}

// ---- softmax with a boolean mask -----------------------------------------------------------

/// Softmax over the last axis of S[..., C] where mask[..., C] (same shape, true = may not
/// attend) hides entries: hidden entries get 0 and a row with every entry hidden gives zeros.
inline Tensor<double> softmax(TensorView<const double> S, TensorView<const bool> mask) {
    Tensor<double> masked(S.shape());  // [..., C]
    for (Index i = 0; i < S.numel(); ++i)
        masked.data()[i] = mask.data()[i] ? -std::numeric_limits<double>::infinity() : S.data()[i];
    return softmax(masked);
}

}  // namespace headwise::test::reference
