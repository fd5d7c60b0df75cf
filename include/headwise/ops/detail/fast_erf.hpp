// SPDX-License-Identifier: MIT
// Branch-free erf, erfc and exp in double that compilers vectorise over a row (GELU's kernels).
#pragma once

#include <cmath>    // std::fabs, std::copysign
#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <cstring>  // std::memcpy
#include <limits>   // std::numeric_limits

namespace headwise::detail {

namespace fast_erf_coeffs {
// Least-squares fits (relative, Chebyshev nodes) against 40-digit references:
// erf(z) / z in z² on [0, 1]; erfc(z) e^{z²} in z - 2.5 on [1, 4];
// z erfc(z) e^{z²} in 1 / z² on [4, inf). Relative error about 1e-11 or better.
inline constexpr double kErfSmall[] = {
    1.1283791670955039,     -0.37612638902892875,   0.11283791660135872,    -0.026866169178791685,
    0.0052239677415371749,  -0.0008547947353823443, 0.00012046464796447443, -1.4796835403507735e-05,
    1.5315112153885257e-06, -1.0486937621068115e-07};
inline constexpr double kErfcxMid[] = {
    0.21080636406113212,     -0.074347346789758947,   0.024937997086691577,
    -0.0080015693824085059,  0.0024670368153805115,   -0.0007335909342420186,
    0.00021101982574862026,  -5.8868977697953534e-05, 1.5961849929791164e-05,
    -4.2142641458200332e-06, 1.0852258711718163e-06,  -2.729991286237632e-07,
    6.713980907571519e-08,   -1.6127241147758691e-08, 3.8141865674158984e-09,
    -9.0778782429404049e-10, 2.0345777874490771e-10,  -3.6660549596057024e-11,
    8.6742314719945313e-12,  -3.628923550547114e-12,  7.1575384508193451e-13};
inline constexpr double kErfcxLarge[] = {
    0.5641895835417976,  -0.28209477931120502, 0.42313787192947222, -1.0572785315225322,
    3.6638039131855762,  -15.197757697681844,  58.532499974304294,  -128.68609158634675,
    -33.719172137898077, -5.1190667471871567,  -0.60094372925652306};
}  // namespace fast_erf_coeffs

/// c[K] + t (c[K+1] + t (...)): Horner's rule written out at compile time (a loop over 21
/// coefficients is not unrolled, and the loop nest then does not vectorise).
template <std::size_t K = 0, std::size_t N>
inline double horner(const double (&c)[N], double t) noexcept {
    if constexpr (K + 1 == N)
        return c[K];
    else
        return c[K] + t * horner<K + 1>(c, t);
}

/// min(a, b) for a >= +0 (NaN gives b) and max(a, b) for a <= -0 (NaN gives a when its sign
/// bit is clear), b a constant of a's sign: compared as integers, because a select between a
/// double and a constant becomes a branch in g++ 12, which then will not vectorise the loop.
inline double min_nonnegative(double a, double b) noexcept {
    std::uint64_t ia, ib;
    std::memcpy(&ia, &a, sizeof ia);
    std::memcpy(&ib, &b, sizeof ib);
    const std::uint64_t m = ia > ib ? ib : ia;
    double r;
    std::memcpy(&r, &m, sizeof r);
    return r;
}
inline double max_nonpositive(double a, double b) noexcept { return min_nonnegative(a, b); }
/// c ? a : b, blended by a bit mask so that both sides stay computed (a select lets g++ move
/// each side into a branch of its own).
inline double pick(bool c, double a, double b) noexcept {
    std::uint64_t ia, ib;
    std::memcpy(&ia, &a, sizeof ia);
    std::memcpy(&ib, &b, sizeof ib);
    const std::uint64_t mask = std::uint64_t{0} - static_cast<std::uint64_t>(c);  // all ones if c
    const std::uint64_t m = (ia & mask) | (ib & ~mask);
    double r;
    std::memcpy(&r, &m, sizeof r);
    return r;
}
/// max(a, b) for a >= +0 (NaN gives NaN), compared as integers likewise.
inline double max_nonnegative(double a, double b) noexcept {
    std::uint64_t ia, ib;
    std::memcpy(&ia, &a, sizeof ia);
    std::memcpy(&ib, &b, sizeof ib);
    const std::uint64_t m = ia < ib ? ib : ia;
    double r;
    std::memcpy(&r, &m, sizeof r);
    return r;
}

/// e^x for x <= 0, relative error ~1e-15 down to -708 (then the subnormals, and 0 below about
/// -745; NaN stays NaN). Round-to-nearest n = x / ln 2 by the 1.5·2^52 trick, e^r by a Taylor
/// polynomial on |r| <= ln2 / 2, then 2^(n+64) assembled in the exponent bits and scaled by
/// 2^-64 so that the subnormals round once: no calls, and no branch that would stop the compiler
/// vectorising a loop over it.
inline double exp_nonpositive(double x) noexcept {
    constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52
    constexpr double kLog2e = 1.4426950408889634074;
    constexpr double kLn2Hi = 6.93147180369123816490e-01;
    constexpr double kLn2Lo = 1.90821492927058770002e-10;
    constexpr double kTwoToMinus64 = 5.42101086242752217004e-20;
    const double xc = max_nonpositive(x, -746.0);  // n >= -1077: n + 64 + 1023 > 0
    const double k = xc * kLog2e + kShift;
    const double n = k - kShift;
    const double r = (xc - n * kLn2Hi) - n * kLn2Lo;
    double p = 1.0 / 479001600.0;  // 1/12!
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    std::uint64_t bits;
    std::memcpy(&bits, &k, sizeof bits);
    bits = (bits + (1023u + 64u)) << 52;  // the low bits of k hold n (two's complement)
    double scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale * kTwoToMinus64;
}

/// erfc(z) for z >= 1 (also +inf -> 0), relative error ~1e-11.
inline double erfc_from_one(double z) noexcept {
    namespace c = fast_erf_coeffs;
    const double zc = min_nonnegative(z, 4.0);
    const double mid = horner(c::kErfcxMid, zc - 2.5);
    const double zl = max_nonnegative(z, 4.0);
    const double large = horner(c::kErfcxLarge, 1.0 / (zl * zl)) / zl;
    const double scaled = pick(z < 4.0, mid, large);
    return scaled * exp_nonpositive(-z * z);
}

/// erf(z) for z in [0, 1] as z P(z²), relative error ~1e-14.
inline double erf_to_one(double z) noexcept {
    return z * horner(fast_erf_coeffs::kErfSmall, z * z);
}

/// erf(x) with relative error ~1e-11 (absolute near ±1): float(erf_fast(x)) is within 1 ulp of
/// the correctly rounded float erf. NaN gives NaN, ±inf give ±1.
inline double erf_fast(double x) noexcept {
    const double z = std::fabs(x);
    const double small = erf_to_one(min_nonnegative(z, 1.0));
    const double large = 1.0 - erfc_from_one(max_nonnegative(z, 1.0));
    const double magnitude = pick(z < 1.0, small, large);
    const double e = std::copysign(magnitude, x);
    return pick(x != x, x, e);
}

/// Standard normal CDF Φ(v) = erfc(-v/√2) / 2 with relative error ~1e-11 on both tails (the left
/// tail through erfc, not 1 + erf). NaN gives NaN, -inf and +inf give 0 and 1.
inline double normal_cdf_fast(double v) noexcept {
    constexpr double kSqrtHalf = 0.70710678118654752440;
    const double z = std::fabs(v) * kSqrtHalf;
    const double half_erf = 0.5 * erf_to_one(min_nonnegative(z, 1.0));
    const double half_erfc = 0.5 * erfc_from_one(max_nonnegative(z, 1.0));
    const double upper = pick(z < 1.0, 0.5 + half_erf, 1.0 - half_erfc);
    const double lower = pick(z < 1.0, 0.5 - half_erf, half_erfc);
    const double cdf = pick(v < 0.0, lower, upper);
    return pick(v != v, v, cdf);
}

}  // namespace headwise::detail
