// SPDX-License-Identifier: MIT
// Tests of the branch-free erf, normal CDF and exp behind GELU: ulp bounds against the C library
// over a dense sweep of floats and against long double, the extremes, and GELU's exact form
// (forward and backward) against a long-double reference.
#include <headwise/ops/activation.hpp>
#include <headwise/ops/detail/fast_erf.hpp>

#include <cmath>        // std::erf, std::erfl, std::isnan
#include <cstdint>      // std::int32_t, std::uint32_t, std::int64_t
#include <cstring>      // std::memcpy
#include <limits>       // std::numeric_limits
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

#include "support/catch.hpp"

namespace test_ops_erf {

using namespace headwise;

namespace {

/// Distance in units in the last place between two finite floats of the same sign (or zeros).
std::int64_t ulp_distance(float a, float b) {
    std::int32_t ia = 0, ib = 0;
    std::memcpy(&ia, &a, sizeof ia);
    std::memcpy(&ib, &b, sizeof ib);
    if (ia < 0) ia = std::numeric_limits<std::int32_t>::min() - ia;  // monotone order
    if (ib < 0) ib = std::numeric_limits<std::int32_t>::min() - ib;
    const std::int64_t d = static_cast<std::int64_t>(ia) - static_cast<std::int64_t>(ib);
    return d < 0 ? -d : d;
}

float erf_float(float x) { return static_cast<float>(detail::erf_fast(static_cast<double>(x))); }

long double cdf_reference(long double v) { return 0.5L * std::erfc(-v / std::sqrt(2.0L)); }

}  // namespace

TEST_CASE("float erf is within 1 ulp of std::erf on a sweep of every 251st float", "[ops][erf]") {
    std::int64_t worst = 0;
    float worst_x = 0.0f;
    std::int64_t checked = 0;
    for (std::uint64_t u = 0; u <= 0xffffffffu; u += 251) {
        const auto bits = static_cast<std::uint32_t>(u);
        float x = 0.0f;
        std::memcpy(&x, &bits, sizeof x);
        if (std::isnan(x)) continue;
        const std::int64_t d = ulp_distance(erf_float(x), std::erf(x));
        if (d > worst) {
            worst = d;
            worst_x = x;
        }
        ++checked;
    }
    INFO("worst at x = " << worst_x);
    CHECK(worst <= 1);
    CHECK(checked > 17000000);
}

TEST_CASE("float erf is within 1 ulp of std::erf densely on [-10, 10]", "[ops][erf]") {
    std::int64_t worst = 0;
    for (int i = -1000000; i <= 1000000; ++i) {
        const float x = static_cast<float>(i) * 1e-5f;
        const std::int64_t d = ulp_distance(erf_float(x), std::erf(x));
        if (d > worst) worst = d;
    }
    CHECK(worst <= 1);
}

TEST_CASE("erf, the normal CDF and exp keep their extremes", "[ops][erf]") {
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const float denorm = std::numeric_limits<float>::denorm_min();
    CHECK(detail::erf_fast(inf) == 1.0);
    CHECK(detail::erf_fast(-inf) == -1.0);
    CHECK(std::isnan(detail::erf_fast(nan)));
    CHECK(detail::erf_fast(0.0) == 0.0);
    CHECK(std::signbit(detail::erf_fast(-0.0)));
    CHECK(erf_float(denorm) == std::erf(denorm));
    CHECK(erf_float(-denorm) == std::erf(-denorm));
    CHECK(erf_float(10.0f) == 1.0f);
    CHECK(detail::normal_cdf_fast(inf) == 1.0);
    CHECK(detail::normal_cdf_fast(-inf) == 0.0);
    CHECK(std::isnan(detail::normal_cdf_fast(nan)));
    CHECK(detail::normal_cdf_fast(0.0) == 0.5);
    CHECK(detail::exp_nonpositive(0.0) == 1.0);
    CHECK(detail::exp_nonpositive(-inf) == 0.0);
    CHECK(detail::exp_nonpositive(-800.0) == 0.0);
    CHECK(std::isnan(detail::exp_nonpositive(nan)));
}

TEST_CASE("double erf, the normal CDF and exp against long double", "[ops][erf]") {
    double erf_rel = 0.0, cdf_rel = 0.0, exp_rel = 0.0;
    for (int i = -300000; i <= 300000; ++i) {
        const double x = static_cast<double>(i) * 1e-4;  // [-30, 30]
        if (i != 0) {
            const long double r = std::erf(static_cast<long double>(x));
            erf_rel =
                std::max(erf_rel, static_cast<double>(std::fabs((detail::erf_fast(x) - r) / r)));
        }
        const double v = x * 1.2;  // [-36, 36]: Φ stays a normal double
        const long double c = cdf_reference(v);
        cdf_rel =
            std::max(cdf_rel, static_cast<double>(std::fabs((detail::normal_cdf_fast(v) - c) / c)));
        const double e = -std::fabs(x) * 23.6;  // [-708, 0]
        const long double re = std::exp(static_cast<long double>(e));
        exp_rel = std::max(exp_rel,
                           static_cast<double>(std::fabs((detail::exp_nonpositive(e) - re) / re)));
    }
    CHECK(erf_rel < 1e-13);
    CHECK(cdf_rel < 5e-11);
    CHECK(exp_rel < 1e-15);
}

TEMPLATE_TEST_CASE("exact GELU forward and backward against a long-double reference", "[ops][erf]",
                   float, double) {
    using T = TestType;
    std::vector<T> x;
    for (int i = -40000; i <= 40000; ++i)
        x.push_back(static_cast<T>(i) * static_cast<T>(5e-4));  // [-20, 20]
    const auto n = static_cast<Index>(x.size());
    std::vector<T> y(x.size()), dy(x.size(), T(1)), dx(x.size(), T(0));
    ops::gelu_forward(x.data(), n, ops::GeluApproximation::none, y.data());
    ops::gelu_backward(x.data(), dy.data(), n, ops::GeluApproximation::none, dx.data());
    const double eps = std::numeric_limits<T>::epsilon();
    double y_err = 0.0, dx_err = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const long double v = x[i];
        const long double cdf = cdf_reference(v);
        const long double pdf =
            std::exp(-0.5L * v * v) / std::sqrt(2.0L * 3.14159265358979323846264L);
        const long double ry = v * cdf, rd = cdf + v * pdf;
        if (std::fabs(ry) >= std::numeric_limits<T>::min())
            y_err = std::max(y_err, static_cast<double>(std::fabs((y[i] - ry) / ry)));
        dx_err = std::max(dx_err, static_cast<double>(std::fabs(dx[i] - rd)));
    }
    INFO("relative error of y " << y_err << ", absolute of dx " << dx_err);
    // float: the rounding of a result good to 1e-11; double: std::erfc and the rounding of
    // v / √2, which the tail's e^{-v²/2} amplifies by up to v² / 2 = 200 at v = -20.
    CHECK(y_err <= (std::is_same_v<T, float> ? eps : 500 * eps));
    CHECK(dx_err <= 2 * eps);  // absolute: GELU' crosses zero near -0.75
}

TEMPLATE_TEST_CASE("exact GELU gives the limits at the infinities and NaN for NaN", "[ops][erf]",
                   float, double) {
    using T = TestType;
    const T inf = std::numeric_limits<T>::infinity();
    const std::vector<T> x{-inf, inf, std::numeric_limits<T>::quiet_NaN(), T(-40), T(0)};
    std::vector<T> y(x.size()), dy(x.size(), T(1)), dx(x.size(), T(0));
    const auto n = static_cast<Index>(x.size());
    ops::gelu_forward(x.data(), n, ops::GeluApproximation::none, y.data());
    ops::gelu_backward(x.data(), dy.data(), n, ops::GeluApproximation::none, dx.data());
    CHECK(y[0] == T(0));
    CHECK(y[1] == inf);
    CHECK(std::isnan(y[2]));
    CHECK(y[3] == T(0));
    CHECK(y[4] == T(0));
    CHECK(dx[0] == T(0));
    CHECK(dx[1] == T(1));
    CHECK(std::isnan(dx[2]));
    CHECK(dx[3] == T(0));
    CHECK(dx[4] == T(0.5));
}

}  // namespace test_ops_erf
