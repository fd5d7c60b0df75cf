// SPDX-License-Identifier: MIT
// Comparing tensors: allclose, and max_abs_diff saying how far apart two tensors are and where.
#pragma once

#include <cmath>    // std::abs, std::isnan, std::isinf
#include <ostream>  // std::ostream
#include <string>   // std::string, std::to_string

#include "config.hpp"
#include "detail/tensor_index.hpp"
#include "detail/tensor_like.hpp"
#include "error.hpp"
#include "shape.hpp"
#include "tensor.hpp"

namespace headwise {

/// How far apart two tensors of one shape are. Every element counts, compared in double.
struct Difference {
    double max_abs = 0.0;   // largest |a - b|; NaN when an element of either is NaN
    double max_rel = 0.0;   // largest |a - b| / max(|a|, |b|) (0 where both are 0)
    Index flat_index = -1;  // row-major index of the largest |a - b|; -1 when there is none
    std::string where;      // its multi-index, "[0, 2, 1]"; empty when there is none

    /// "max |a - b| = 0.001 at [0, 2, 1] (max relative 0.002)", for test failure messages.
    friend std::ostream& operator<<(std::ostream& os, const Difference& d) {
        return os << "max |a - b| = " << d.max_abs << " at " << (d.where.empty() ? "-" : d.where)
                  << " (max relative " << d.max_rel << ")";
    }
};

/// The largest absolute and relative elementwise differences between `a` and `b` and where the
/// largest absolute one is. The scalar types may differ (a float result against a double
/// reference). Throws shape_error unless the shapes match.
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Difference max_abs_diff(const X& a, const Y& b);

/// True when |a - b| <= atol + rtol * |b| for every element (NumPy's rule: `b` is the reference),
/// false if any element of either is NaN. Equal infinities count as close. The scalar types may
/// differ. Throws shape_error unless the shapes match.
template <class X, class Y, detail::require_tensors<X, Y> = 0>
bool allclose(const X& a, const Y& b, double rtol = 1e-5, double atol = 1e-8);

// ---- definitions ---------------------------------------------------------------------------

template <class X, class Y, detail::require_tensors<X, Y>>
Difference max_abs_diff(const X& a, const Y& b) {
    const auto A = detail::const_view(a);
    const auto B = detail::const_view(b);
    detail::check_shape("headwise::max_abs_diff", "b", B.shape(), A.shape());
    Difference d;
    for (Index i = 0; i < A.numel(); ++i) {
        const double x = static_cast<double>(A[i]);
        const double y = static_cast<double>(B[i]);
        // x == y first, so that equal infinities differ by 0 rather than by inf - inf = NaN.
        const double diff = x == y ? 0.0 : std::abs(x - y);
        if (std::isnan(diff)) {
            // The first NaN sticks: no later comparison with it succeeds.
            if (!std::isnan(d.max_abs)) {
                d.max_abs = diff;
                d.max_rel = diff;
                d.flat_index = i;
            }
            continue;
        }
        if (d.flat_index < 0 || diff > d.max_abs) {
            d.max_abs = diff;
            d.flat_index = i;
        }
        const double scale = std::abs(x) > std::abs(y) ? std::abs(x) : std::abs(y);
        const double rel = diff == 0.0 ? 0.0 : diff / scale;
        if (rel > d.max_rel) d.max_rel = rel;
    }
    if (d.flat_index >= 0) d.where = detail::index_string(A.shape(), d.flat_index);
    return d;
}

template <class X, class Y, detail::require_tensors<X, Y>>
bool allclose(const X& a, const Y& b, double rtol, double atol) {
    const auto A = detail::const_view(a);
    const auto B = detail::const_view(b);
    detail::check_shape("headwise::allclose", "b", B.shape(), A.shape());
    for (Index i = 0; i < A.numel(); ++i) {
        const double x = static_cast<double>(A[i]);
        const double y = static_cast<double>(B[i]);
        if (x == y) continue;  // also equal infinities
        // An infinity equals only itself (rtol * inf would excuse any difference). The negated
        // test makes a NaN anywhere fail.
        if (std::isinf(x) || std::isinf(y)) return false;
        if (!(std::abs(x - y) <= atol + rtol * std::abs(y))) return false;
    }
    return true;
}

}  // namespace headwise
