// SPDX-License-Identifier: MIT
// Scale-aware tensor comparison for tests: the largest difference relative to the reference's size.
#pragma once

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <limits>     // std::numeric_limits
#include <sstream>    // std::ostringstream
#include <string>     // std::string

#include <headwise/compare.hpp>

namespace headwise::test {

/// max |a - b| / max |b|: one number per tensor, so that entries near zero (a masked weight, a
/// cancelled gradient) are judged against the tensor's scale instead of their own. When b is all
/// zero, max |a - b| itself. Tensors of different shapes are infinitely far apart.
struct ScaledDifference {
    double rel = 0.0;
    Difference diff;
    std::string shape_mismatch;  // "shape [2, 3], reference shape [3, 2]"; empty when they agree
    std::string str() const {
        std::ostringstream os;
        if (shape_mismatch.empty())
            os << "scaled error " << rel << ": " << diff;
        else
            os << shape_mismatch;
        return os.str();
    }
};

/// The scaled difference of result `a` from reference `b`; the scalar types may differ (a float
/// result against a double reference).
template <class X, class Y>
ScaledDifference scaled_difference(const X& a, const Y& b) {
    ScaledDifference d;
    const auto A = detail::const_view(a);
    const auto B = detail::const_view(b);
    if (A.shape() != B.shape()) {
        d.rel = std::numeric_limits<double>::infinity();
        d.shape_mismatch = "shape " + A.shape().str() + ", reference shape " + B.shape().str();
        return d;
    }
    d.diff = max_abs_diff(A, B);
    double scale = 0.0;
    for (Index i = 0; i < B.numel(); ++i)
        scale = std::max(scale, std::abs(static_cast<double>(B[i])));
    d.rel = scale > 0.0 ? d.diff.max_abs / scale : d.diff.max_abs;
    return d;
}

/// True when `a` and `b` have the same shape and equal elements (exact comparison).
template <class T>
bool identical(TensorView<const T> a, TensorView<const T> b) {
    if (a.shape() != b.shape()) return false;
    for (Index i = 0; i < a.numel(); ++i)
        if (!(a[i] == b[i])) return false;
    return true;
}
template <class T>
bool identical(const Tensor<T>& a, const Tensor<T>& b) {
    return identical<T>(a.view(), b.view());
}

}  // namespace headwise::test

/// CHECKs that `a` has the shape of reference `b` and matches it to `tol` relative to b's largest
/// entry (see scaled_difference), printing the largest difference and where it is on failure.
/// The one way the tests compare a result with a reference; tolerances are in tolerance.hpp.
#define HEADWISE_CHECK_CLOSE(a, b, tol)                                   \
    do {                                                                  \
        const auto hw_d_ = ::headwise::test::scaled_difference((a), (b)); \
        INFO(#a " vs " #b ": " << hw_d_.str());                           \
        CHECK(hw_d_.rel <= (tol));                                        \
    } while (false)
