// SPDX-License-Identifier: MIT
// Scale-aware tensor comparison for tests: the largest difference relative to the reference's size.
#pragma once

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <sstream>    // std::ostringstream
#include <string>     // std::string

#include <headwise/compare.hpp>

namespace headwise::test {

/// max |a - b| / max |b|: one number per tensor, so that entries near zero (a masked weight, a
/// cancelled gradient) are judged against the tensor's scale instead of their own.
struct ScaledDifference {
    double rel = 0.0;
    Difference diff;
    std::string str() const {
        std::ostringstream os;
        os << "scaled error " << rel << ": " << diff;
        return os.str();
    }
};

template <class X, class Y>
ScaledDifference scaled_difference(const X& a, const Y& b) {
    ScaledDifference d;
    d.diff = max_abs_diff(a, b);
    const auto B = detail::const_view(b);
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

/// CHECKs that `a` matches reference `b` to `tol` relative to b's largest entry, printing the
/// largest difference and where it is on failure.
#define HEADWISE_CHECK_CLOSE(a, b, tol)                                   \
    do {                                                                  \
        const auto hw_d_ = ::headwise::test::scaled_difference((a), (b)); \
        INFO(#a " vs " #b ": " << hw_d_.str());                           \
        CHECK(hw_d_.rel <= (tol));                                        \
    } while (false)
