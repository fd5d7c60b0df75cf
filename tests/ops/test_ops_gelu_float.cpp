// SPDX-License-Identifier: MIT
// Float exact GELU (detail::gelu_float through ops::gelu_forward) within 1 ulp of the correctly
// rounded x Φ(x): a strided sweep of every float in [-20, 20], every float of the ranges where the
// kernel changes behaviour, and (hidden, for a release build) every float there is.
#include <headwise/ops/activation.hpp>

#include <cmath>    // std::erfc, std::fabs, std::isnan, std::nextafter, std::signbit, std::sqrt
#include <cstdint>  // std::int32_t, std::int64_t, std::uint32_t
#include <cstring>  // std::memcpy
#include <limits>   // std::numeric_limits
#include <vector>   // std::vector

#include "support/catch.hpp"

namespace test_ops_gelu_float {

using namespace headwise;

namespace {

/// The float with the given bit pattern, and the bit pattern of a float in the monotone order
/// (negative floats below positive, -0 and +0 together).
float from_bits(std::uint32_t b) {
    float f = 0.0f;
    std::memcpy(&f, &b, sizeof f);
    return f;
}
std::int64_t ordinal(float f) {
    std::int32_t i = 0;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -static_cast<std::int64_t>(i & 0x7fffffff) : static_cast<std::int64_t>(i);
}

/// x Φ(x) rounded to float from long double (64-bit significand): Φ through erfc keeps the left
/// tail's relative accuracy; the rounding of -x/√2 (2^-64 relative) moves Φ by at most
/// x² 2^-64 ~ 1e-17 there. Beyond |x| = 20, Φ is 0 or 1 to far below float's precision. Below
/// |x| = 2^-60, x Φ(x) = x/2 + x²/√(2π) + ... is x/2 in long double: when x/2 falls halfway
/// between two floats (a subnormal x), the true value lies just above it.
float gelu_reference(float x) {
    if (x > 20.0f) return x;
    if (x < -20.0f) return -0.0f;
    const long double v = x;
    if (std::fabs(v) < 0x1p-60L) {
        const long double half = v / 2;
        float r = static_cast<float>(half);
        if (static_cast<long double>(r) < half)
            r = std::nextafter(r, std::numeric_limits<float>::infinity());
        return r;
    }
    return static_cast<float>(v * 0.5L * std::erfc(-v / std::sqrt(2.0L)));
}

struct Sweep {
    std::int64_t worst = 0;
    float worst_x = 0.0f, worst_y = 0.0f, worst_ref = 0.0f;
    std::int64_t count = 0;
    std::int64_t off_by_one = 0;  // results one ulp from the correctly rounded one
    std::int64_t nan_mismatches = 0;
};

/// Runs ops::gelu_forward over the bit patterns first, first + stride, ... up to last (as
/// unsigned integers) in blocks, and records the worst ulp distance to gelu_reference.
void sweep(std::uint32_t first, std::uint32_t last, std::uint32_t stride, Sweep& s) {
    constexpr std::size_t kBlock = 1 << 16;
    std::vector<float> x(kBlock), y(kBlock);
    std::uint64_t b = first;
    while (b <= last) {
        std::size_t m = 0;
        for (; m < kBlock && b <= last; ++m, b += stride)
            x[m] = from_bits(static_cast<std::uint32_t>(b));
        ops::gelu_forward(x.data(), static_cast<Index>(m), ops::GeluApproximation::none, y.data());
        for (std::size_t i = 0; i < m; ++i) {
            ++s.count;
            if (std::isnan(x[i])) {
                if (!std::isnan(y[i])) ++s.nan_mismatches;
                continue;
            }
            const float r = gelu_reference(x[i]);
            const std::int64_t o = ordinal(y[i]) - ordinal(r);
            const std::int64_t d = o < 0 ? -o : o;
            if (d == 1) ++s.off_by_one;
            if (d > s.worst) {
                s.worst = d;
                s.worst_x = x[i];
                s.worst_y = y[i];
                s.worst_ref = r;
            }
        }
    }
}

std::uint32_t bits_of(float f) {
    std::uint32_t b = 0;
    std::memcpy(&b, &f, sizeof b);
    return b;
}

/// Every float of [lo, hi] (same sign, |lo| <= |hi|) with the given stride.
void sweep_range(float lo, float hi, std::uint32_t stride, Sweep& s) {
    sweep(bits_of(lo), bits_of(hi), stride, s);
}

void report(const Sweep& s) {
    INFO(s.count << " floats, " << s.off_by_one << " of them 1 ulp from the correctly rounded "
                 << "result; worst " << s.worst << " ulp at x = " << s.worst_x << " (got "
                 << s.worst_y << ", correctly rounded " << s.worst_ref << ")");
    CHECK(s.worst <= 1);
    CHECK(s.nan_mismatches == 0);
}

}  // namespace

TEST_CASE(
    "float exact GELU is within 1 ulp of the correctly rounded result on every 211th float "
    "in -20 to 20",
    "[ops][gelu]") {
    Sweep s;
    sweep_range(0.0f, 20.0f, 211, s);
    sweep_range(-0.0f, -20.0f, 211, s);
    report(s);
}

TEST_CASE("float exact GELU is within 1 ulp on every float where the kernel changes behaviour",
          "[ops][gelu]") {
    Sweep s;
    sweep_range(-14.0f, -15.6f, 1, s);  // the last nonzero results, subnormal, and the clamp
    sweep_range(0.0f, 1e-3f, 997, s);   // tiny |x|: every 997th of 9.8e8 floats
    sweep_range(-0.0f, -1e-3f, 997, s);
    sweep_range(2.9f, 3.1f, 1, s);  // t = (|x| - 3) / (|x| + 3) crosses 0
    sweep_range(-2.9f, -3.1f, 1, s);
    sweep_range(-0.7f, -0.8f, 1, s);  // GELU's minimum near -0.75
    sweep_range(5.0f, 6.0f, 1, s);    // 1 - Φ(x) drops below half an ulp of 1
    report(s);
}

// Every one of the 2^32 bit patterns (NaNs included): minutes in a release build, so hidden;
// run it with `test_ops_gelu_float "[.exhaustive]"`.
TEST_CASE("float exact GELU is within 1 ulp of the correctly rounded result on every float",
          "[ops][gelu][.exhaustive]") {
    Sweep s;
    sweep(0u, 0xffffffffu, 1, s);
    report(s);
}

TEST_CASE("float exact GELU keeps the limits, zero's sign and NaN", "[ops][gelu]") {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> x{-inf,
                               inf,
                               std::numeric_limits<float>::quiet_NaN(),
                               -1e30f,
                               1e30f,
                               -16.0f,
                               0.0f,
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max(),
                               -0.0f,
                               -std::numeric_limits<float>::quiet_NaN()};
    std::vector<float> y(x.size()), dx(x.size(), 0.0f);
    const std::vector<float> dy(x.size(), 1.0f);
    const auto n = static_cast<Index>(x.size());
    ops::gelu_forward(x.data(), n, ops::GeluApproximation::none, y.data());
    ops::gelu_backward(x.data(), dy.data(), n, ops::GeluApproximation::none, dx.data());
    CHECK(y[0] == 0.0f);
    CHECK(y[1] == inf);
    CHECK(std::isnan(y[2]));
    CHECK(y[3] == 0.0f);
    CHECK(y[4] == 1e30f);
    CHECK(y[5] == 0.0f);
    CHECK(y[6] == 0.0f);
    // x Φ(x) lies just above half of denorm_min: denorm_min correctly rounded, 0 one ulp away
    CHECK((y[7] == x[7] || y[7] == 0.0f));
    CHECK(y[8] == std::numeric_limits<float>::max());
    CHECK((y[9] == 0.0f && std::signbit(y[9])));  // -0 Φ(-0) = -0
    CHECK(std::isnan(y[10]));
    CHECK(dx[0] == 0.0f);
    CHECK(dx[1] == 1.0f);
    CHECK(std::isnan(dx[2]));
    CHECK(dx[3] == 0.0f);
    CHECK(dx[4] == 1.0f);
    CHECK(dx[5] == 0.0f);
    CHECK(dx[6] == 0.5f);
    CHECK(dx[8] == 1.0f);
    CHECK(dx[9] == 0.5f);
    CHECK(std::isnan(dx[10]));
}

TEST_CASE(
    "float exact GELU's derivative is within 2 eps of a long-double reference on every "
    "997th float in -20 to 20",
    "[ops][gelu]") {
    std::vector<float> x;
    for (std::uint64_t b = 0; b <= bits_of(20.0f); b += 997) {
        x.push_back(from_bits(static_cast<std::uint32_t>(b)));
        x.push_back(-from_bits(static_cast<std::uint32_t>(b)));
    }
    const std::vector<float> dy(x.size(), 1.0f);
    std::vector<float> dx(x.size(), 0.0f);
    ops::gelu_backward(x.data(), dy.data(), static_cast<Index>(x.size()),
                       ops::GeluApproximation::none, dx.data());
    double worst = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const long double v = x[i];
        const long double d =
            0.5L * std::erfc(-v / std::sqrt(2.0L)) +
            v * std::exp(-0.5L * v * v) / std::sqrt(2.0L * 3.14159265358979323846264L);
        worst = std::max(worst, static_cast<double>(std::fabs(dx[i] - d)));
    }
    INFO("absolute error of GELU' " << worst);
    CHECK(worst <= 2.0 * std::numeric_limits<float>::epsilon());
}

}  // namespace test_ops_gelu_float
