// SPDX-License-Identifier: MIT
// Tape functions on tensors: slice, index_select, sum/mean/max over a dimension (with a padding
// mask), elementwise product, a b^T, scaling.
#pragma once

#include <algorithm>  // std::copy_n, std::fill_n
#include <cmath>      // std::isnan
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <memory>     // std::shared_ptr, std::make_shared
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "tape.hpp"

namespace headwise::autograd {

/// x[..., start : start + length, ...] along `dim` (negative: from the back), copied. 0 <= start,
/// 0 <= length, start + length <= x.shape()[dim]. Gradient: dy in the slice, zero elsewhere.
template <class T>
Var<T> slice(const Var<T>& x, int dim, Index start, Index length);

/// The slices of x along `dim` at `indices` (rank 1, each in [0, x.shape()[dim]), repeats
/// allowed), in that order: torch.index_select. Gradient: each dy slice added to the slice of x
/// it came from (repeats sum).
template <class T>
Var<T> index_select(const Var<T>& x, int dim, TensorView<const std::int64_t> indices);

/// The sum, mean or max of x over `dim`, which the result drops (x [B, S, E], dim 1: [B, E]).
/// With `padding_mask` (bool, the shape of x's dimensions 0..dim, e.g. [B, S] for dim 1 of
/// [B, S, E]; true = padding, as every mask of the library) the masked positions are left out.
/// A row with no position left (fully masked, or dim of extent 0) gives sum 0, mean 0 and max 0,
/// with zero gradient — never NaN. Gradients: sum dy to each unmasked position; mean dy / count;
/// max dy to the first position holding the maximum (a NaN counts as the maximum, as in torch).
template <class T>
Var<T> sum(const Var<T>& x, int dim);
template <class T>
Var<T> sum(const Var<T>& x, int dim, TensorView<const bool> padding_mask);
template <class T>
Var<T> mean(const Var<T>& x, int dim);
template <class T>
Var<T> mean(const Var<T>& x, int dim, TensorView<const bool> padding_mask);
template <class T>
Var<T> max(const Var<T>& x, int dim);
template <class T>
Var<T> max(const Var<T>& x, int dim, TensorView<const bool> padding_mask);

/// a ⊙ b, elementwise, equal shapes. Gradients: dy ⊙ b and dy ⊙ a (2 a dy for a Var passed twice).
template <class T>
Var<T> mul(const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> operator*(const Var<T>& a, const Var<T>& b) {
    return mul(a, b);
}

/// a b^T: a [..., K], b [N, K] -> [..., N] (a tied LM head: logits = h E^T, E the embedding table
/// as Tape::parameter). Gradients: da = dy b, db = dy^T a (over all leading rows of a).
template <class T>
Var<T> matmul_transposed(const Var<T>& a, const Var<T>& b);

namespace detail {
template <class U>
struct same_type {
    using type = U;
};
}  // namespace detail

/// c x. Gradient c dy.
template <class T>
Var<T> scale(const Var<T>& x, typename detail::same_type<T>::type c);
template <class T>
Var<T> operator*(const Var<T>& x, typename detail::same_type<T>::type c) {
    return scale(x, c);
}
template <class T>
Var<T> operator*(typename detail::same_type<T>::type c, const Var<T>& x) {
    return scale(x, c);
}

// ---- definitions ----------------------------------------------------------------------------

namespace detail {

/// x viewed as [outer, n, inner] around axis `dim`, checked (rank >= 1, dim in [-rank, rank)).
struct Around {
    int dim = 0;
    Index outer = 1, n = 1, inner = 1;
};

inline Around around(const char* fn, const Shape& s, int dim) {
    if (s.rank() == 0 || dim < -s.rank() || dim >= s.rank())
        throw_invalid_argument(fn, "dim",
                               "must be in [-" + std::to_string(s.rank()) + ", " +
                                   std::to_string(s.rank()) + ") for x of shape " + s.str(),
                               std::to_string(dim));
    Around a;
    a.dim = s.normalize_axis(dim);
    for (int i = 0; i < a.dim; ++i) a.outer *= s[i];
    a.n = s[a.dim];
    for (int i = a.dim + 1; i < s.rank(); ++i) a.inner *= s[i];
    return a;
}

/// `s` with axis `dim` of extent `n` (n < 0: removed).
inline Shape with_axis(const Shape& s, int dim, Index n) {
    std::vector<Index> d;
    for (int i = 0; i < s.rank(); ++i) {
        if (i != dim)
            d.push_back(s[i]);
        else if (n >= 0)
            d.push_back(n);
    }
    return Shape(d);
}

/// Which positions [outer, n] a reduction keeps (all without a mask), checked against x.
inline std::shared_ptr<std::vector<char>> kept(const char* fn, const Shape& s, const Around& a,
                                               const TensorView<const bool>* mask) {
    auto keep = std::make_shared<std::vector<char>>(static_cast<std::size_t>(a.outer * a.n), 1);
    if (mask == nullptr) return keep;
    std::vector<Index> lead;
    for (int i = 0; i <= a.dim; ++i) lead.push_back(s[i]);
    const Shape expected(lead);
    if (mask->shape() != expected)
        throw shape_error(
            fn, "padding_mask",
            expected.str() + " (x's dimensions up to dim " + std::to_string(a.dim) + ")",
            mask->shape());
    for (Index i = 0; i < a.outer * a.n; ++i)
        (*keep)[static_cast<std::size_t>(i)] = mask->data()[i] ? 0 : 1;
    return keep;
}

enum class Reduce { sum, mean, max };

template <class T>
Var<T> reduce(const char* fn, const Var<T>& x, int dim, const TensorView<const bool>* mask,
              Reduce op) {
    Tape<T>& tape = Tape<T>::of(fn, "x", x);
    const Around a = around(fn, x.shape(), dim);
    const std::shared_ptr<std::vector<char>> keep = kept(fn, x.shape(), a, mask);
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, false);
    auto y = std::make_shared<Tensor<T>>(with_axis(x.shape(), a.dim, -1));  // zeros
    // Per output row o: how many positions count (mean), and per output element the position
    // that holds the maximum (max; -1 when none does).
    auto count = std::make_shared<std::vector<Index>>(static_cast<std::size_t>(a.outer), 0);
    auto arg = std::make_shared<std::vector<Index>>(
        op == Reduce::max ? static_cast<std::size_t>(a.outer * a.inner) : 0, -1);
    const T* X = x.value().data();  // [outer, n, inner]
    T* Y = y->data();               // [outer, inner]
    for (Index o = 0; o < a.outer; ++o) {
        for (Index j = 0; j < a.n; ++j) {
            if (!(*keep)[static_cast<std::size_t>(o * a.n + j)]) continue;
            ++(*count)[static_cast<std::size_t>(o)];
            const T* row = X + (o * a.n + j) * a.inner;
            for (Index i = 0; i < a.inner; ++i) {
                if (op != Reduce::max) {
                    Y[o * a.inner + i] += row[i];
                    continue;
                }
                Index& best = (*arg)[static_cast<std::size_t>(o * a.inner + i)];
                const T v = row[i];
                const T b = best < 0 ? v : X[(o * a.n + best) * a.inner + i];
                if (best < 0 || v > b || (std::isnan(v) && !std::isnan(b))) {
                    best = j;
                    Y[o * a.inner + i] = v;
                }
            }
        }
        const Index c = (*count)[static_cast<std::size_t>(o)];
        if (op == Reduce::mean && c > 0)
            for (Index i = 0; i < a.inner; ++i) Y[o * a.inner + i] /= static_cast<T>(c);
    }
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    const Shape from = x.shape();
    return tape.record(
        std::move(y), yv, [&tape, x, a, keep, count, arg, op, from](TensorView<const T> dy) {
            Tensor<T> dx(from);  // zeros: masked positions get none
            const T* dY = dy.data();
            T* dX = dx.data();
            for (Index o = 0; o < a.outer; ++o) {
                const Index c = (*count)[static_cast<std::size_t>(o)];
                for (Index j = 0; j < a.n; ++j) {
                    if (!(*keep)[static_cast<std::size_t>(o * a.n + j)]) continue;
                    T* row = dX + (o * a.n + j) * a.inner;
                    for (Index i = 0; i < a.inner; ++i) {
                        const T g = dY[o * a.inner + i];
                        if (op == Reduce::sum)
                            row[i] = g;
                        else if (op == Reduce::mean)
                            row[i] = g / static_cast<T>(c);
                        else if ((*arg)[static_cast<std::size_t>(o * a.inner + i)] == j)
                            row[i] = g;
                    }
                }
            }
            tape.accumulate(x, std::move(dx));
        });
}

}  // namespace detail

template <class T>
Var<T> slice(const Var<T>& x, int dim, Index start, Index length) {
    constexpr const char* fn = "headwise::autograd::slice";
    Tape<T>& tape = Tape<T>::of(fn, "x", x);
    const detail::Around a = detail::around(fn, x.shape(), dim);
    if (start < 0 || start > a.n)
        throw_invalid_argument(fn, "start",
                               "must be in [0, " + std::to_string(a.n) + "] for x of shape " +
                                   x.shape().str() + " along dim " + std::to_string(a.dim),
                               std::to_string(start));
    if (length < 0 || start + length > a.n)
        throw_invalid_argument(fn, "length",
                               "must be in [0, " + std::to_string(a.n - start) + "] (start " +
                                   std::to_string(start) + " of extent " + std::to_string(a.n) +
                                   ")",
                               std::to_string(length));
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, false);
    auto y = std::make_shared<Tensor<T>>(
        Tensor<T>::uninitialized(detail::with_axis(x.shape(), a.dim, length)));
    const T* X = x.value().data();  // [outer, n, inner]
    for (Index o = 0; o < a.outer; ++o)
        std::copy_n(X + (o * a.n + start) * a.inner, length * a.inner,
                    y->data() + o * length * a.inner);
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    const Shape from = x.shape();
    return tape.record(std::move(y), yv,
                       [&tape, x, a, start, length, from](TensorView<const T> dy) {
                           Tensor<T> dx(from);  // zeros outside the slice
                           for (Index o = 0; o < a.outer; ++o)
                               std::copy_n(dy.data() + o * length * a.inner, length * a.inner,
                                           dx.data() + (o * a.n + start) * a.inner);
                           tape.accumulate(x, std::move(dx));
                       });
}

template <class T>
Var<T> index_select(const Var<T>& x, int dim, TensorView<const std::int64_t> indices) {
    constexpr const char* fn = "headwise::autograd::index_select";
    Tape<T>& tape = Tape<T>::of(fn, "x", x);
    const detail::Around a = detail::around(fn, x.shape(), dim);
    if (indices.rank() != 1) throw shape_error(fn, "indices", "[K] (rank 1)", indices.shape());
    const Index k = indices.numel();
    for (Index i = 0; i < k; ++i)
        if (indices.data()[i] < 0 || indices.data()[i] >= a.n)
            throw_invalid_argument(fn, "indices[" + std::to_string(i) + "]",
                                   "must be in [0, " + std::to_string(a.n) + ") for x of shape " +
                                       x.shape().str() + " along dim " + std::to_string(a.dim),
                                   std::to_string(indices.data()[i]));
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, false);
    auto ids = std::make_shared<std::vector<Index>>(indices.data(), indices.data() + k);
    auto y = std::make_shared<Tensor<T>>(
        Tensor<T>::uninitialized(detail::with_axis(x.shape(), a.dim, k)));
    const T* X = x.value().data();  // [outer, n, inner]
    for (Index o = 0; o < a.outer; ++o)
        for (Index i = 0; i < k; ++i)
            std::copy_n(X + (o * a.n + (*ids)[static_cast<std::size_t>(i)]) * a.inner, a.inner,
                        y->data() + (o * k + i) * a.inner);
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    const Shape from = x.shape();
    return tape.record(std::move(y), yv, [&tape, x, a, ids, k, from](TensorView<const T> dy) {
        Tensor<T> dx(from);  // zeros; repeated indices add up
        for (Index o = 0; o < a.outer; ++o)
            for (Index i = 0; i < k; ++i) {
                const T* g = dy.data() + (o * k + i) * a.inner;
                T* d = dx.data() + (o * a.n + (*ids)[static_cast<std::size_t>(i)]) * a.inner;
                for (Index e = 0; e < a.inner; ++e) d[e] += g[e];
            }
        tape.accumulate(x, std::move(dx));
    });
}

template <class T>
Var<T> sum(const Var<T>& x, int dim) {
    return detail::reduce<T>("headwise::autograd::sum", x, dim, nullptr, detail::Reduce::sum);
}
template <class T>
Var<T> sum(const Var<T>& x, int dim, TensorView<const bool> padding_mask) {
    return detail::reduce<T>("headwise::autograd::sum", x, dim, &padding_mask, detail::Reduce::sum);
}
template <class T>
Var<T> mean(const Var<T>& x, int dim) {
    return detail::reduce<T>("headwise::autograd::mean", x, dim, nullptr, detail::Reduce::mean);
}
template <class T>
Var<T> mean(const Var<T>& x, int dim, TensorView<const bool> padding_mask) {
    return detail::reduce<T>("headwise::autograd::mean", x, dim, &padding_mask,
                             detail::Reduce::mean);
}
template <class T>
Var<T> max(const Var<T>& x, int dim) {
    return detail::reduce<T>("headwise::autograd::max", x, dim, nullptr, detail::Reduce::max);
}
template <class T>
Var<T> max(const Var<T>& x, int dim, TensorView<const bool> padding_mask) {
    return detail::reduce<T>("headwise::autograd::max", x, dim, &padding_mask, detail::Reduce::max);
}

template <class T>
Var<T> mul(const Var<T>& a, const Var<T>& b) {
    constexpr const char* fn = "headwise::autograd::mul";
    Tape<T>& tape = Tape<T>::of(fn, "a", a);
    if (b.shape() != a.shape()) throw shape_error(fn, "b", a.shape().str(), b.shape());
    const bool rec = tape.begin_call(fn, {&a, &b}, {"a", "b"}, false);
    auto y = std::make_shared<Tensor<T>>(Tensor<T>::uninitialized(a.shape()));
    const Index n = a.numel();
    for (Index i = 0; i < n; ++i) y->data()[i] = a.value().data()[i] * b.value().data()[i];
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    return tape.record(std::move(y), yv, [&tape, a, b](TensorView<const T> dy) {
        // d(a ⊙ b) = dy ⊙ b for a, dy ⊙ a for b; the values stay alive through the Vars.
        const Index count = dy.numel();
        Tensor<T> da = Tensor<T>::uninitialized(dy.shape());
        Tensor<T> db = Tensor<T>::uninitialized(dy.shape());
        for (Index i = 0; i < count; ++i) {
            da.data()[i] = dy.data()[i] * b.value().data()[i];
            db.data()[i] = dy.data()[i] * a.value().data()[i];
        }
        tape.accumulate(a, std::move(da));
        tape.accumulate(b, std::move(db));
    });
}

template <class T>
Var<T> matmul_transposed(const Var<T>& a, const Var<T>& b) {
    constexpr const char* fn = "headwise::autograd::matmul_transposed";
    Tape<T>& tape = Tape<T>::of(fn, "a", a);
    if (a.shape().rank() == 0) throw shape_error(fn, "a", "[..., K] (rank >= 1)", a.shape());
    const Index K = a.shape().back();
    if (b.shape().rank() != 2 || b.shape()[1] != K)
        throw shape_error(fn, "b", "[N, " + std::to_string(K) + "] (a's last extent)", b.shape());
    const bool rec = tape.begin_call(fn, {&a, &b}, {"a", "b"}, false);
    const Index N = b.shape()[0];
    auto y = std::make_shared<Tensor<T>>(
        Tensor<T>::uninitialized(detail::with_axis(a.shape(), a.shape().rank() - 1, N)));
    // Y = A B^T over the rows of a: [M, K] x [K, N].
    if (y->numel() != 0) {
        if (K == 0)
            y->matrix().setZero();
        else
            y->matrix().noalias() = a.value().matrix() * b.value().matrix().transpose();
    }
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    return tape.record(std::move(y), yv, [&tape, a, b](TensorView<const T> dy) {
        Tensor<T> da(a.shape()), db(b.shape());  // zeros (an empty product adds nothing)
        if (dy.numel() != 0 && da.numel() != 0) {
            da.matrix().noalias() = dy.matrix() * b.value().matrix();              // [M, K]
            db.matrix().noalias() = dy.matrix().transpose() * a.value().matrix();  // [N, K]
        }
        tape.accumulate(a, std::move(da));
        tape.accumulate(b, std::move(db));
    });
}

template <class T>
Var<T> scale(const Var<T>& x, typename detail::same_type<T>::type c) {
    constexpr const char* fn = "headwise::autograd::scale";
    Tape<T>& tape = Tape<T>::of(fn, "x", x);
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, false);
    auto y = std::make_shared<Tensor<T>>(Tensor<T>::uninitialized(x.shape()));
    for (Index i = 0; i < x.numel(); ++i) y->data()[i] = c * x.value().data()[i];
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    return tape.record(std::move(y), yv, [&tape, x, c](TensorView<const T> dy) {
        Tensor<T> dx = Tensor<T>::uninitialized(dy.shape());
        for (Index i = 0; i < dy.numel(); ++i) dx.data()[i] = c * dy.data()[i];
        tape.accumulate(x, std::move(dx));
    });
}

}  // namespace headwise::autograd
