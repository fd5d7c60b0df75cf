// SPDX-License-Identifier: MIT
// Float exact GELU x Φ(x) and its derivative from one tail function, branch-free (vectorises).
#pragma once

#include <cmath>    // std::copysign
#include <cstdint>  // std::uint32_t, std::uint64_t
#include <cstring>  // std::memcpy

#include "fast_erf.hpp"  // horner, pick

namespace headwise::detail {

namespace gelu_float_coeffs {
// Both from tools/fit_gelu_float.py (relative minimax fits against mpmath at 50 digits).
// G(a) = Φ(-a) e^{a²/2} as a polynomial in t = (a - 3) / (a + 3) on a in [0, 15.5], relative
// error 1.2e-8.
inline constexpr double kTail[] = {
    0.12151394726283316,    -0.20640262356284172, 0.1232250636857034,     -0.04621320316854869,
    0.006131678964090739,   0.002904032321994897, -0.0009823635354775078, -0.00033807621389210854,
    0.00011401623624246807, 5.220710782432962e-05};
// e^r on |r| <= ln2 / 2, relative error 1.9e-9.
inline constexpr double kExp[] = {1.0000000005541871,   1.000000036323096,   0.4999999207949483,
                                  0.16666420170187327,  0.04166822564196379, 0.008374815781745096,
                                  0.0013836841935596254};
}  // namespace gelu_float_coeffs

/// c ? a : b for floats, blended by a bit mask (32-bit lanes: eight to an AVX2 register).
inline float pick_float(bool c, float a, float b) noexcept {
    std::uint32_t ia, ib;
    std::memcpy(&ia, &a, sizeof ia);
    std::memcpy(&ib, &b, sizeof ib);
    const std::uint32_t mask = std::uint32_t{0} - static_cast<std::uint32_t>(c);  // all ones if c
    const std::uint32_t m = (ia & mask) | (ib & ~mask);
    float r;
    std::memcpy(&r, &m, sizeof r);
    return r;
}

/// min(|x|, 15.5) as an unsigned integer minimum of the bit patterns (one instruction a lane);
/// NaN and ±inf give 15.5. Clamping there changes no result: below -14.1 float GELU rounds to -0,
/// below -15.2 its derivative to -0, and above 5.5 Φ(x) is 1 to float's precision.
inline float gelu_float_abs(float x) noexcept {
    constexpr float kClamp = 15.5f;
    std::uint32_t ix, ic;
    std::memcpy(&ix, &x, sizeof ix);
    std::memcpy(&ic, &kClamp, sizeof ic);
    ix &= 0x7fffffffu;
    const std::uint32_t m = ix < ic ? ix : ic;
    float r;
    std::memcpy(&r, &m, sizeof r);
    return r;
}

/// e^{-a²/2} for a float a in [0, 15.5], relative error below 2e-9 (float's needs, not
/// double's): n = the nearest integer to -a²/2 / ln 2 by the 1.5·2^52 trick, r = -a²/2 - n ln 2
/// in one step (its rounding, 1e-14 at most, is far below what float needs), e^r for
/// |r| <= ln2 / 2 by a fitted polynomial, 2^n assembled in the exponent bits (n >= -174: no
/// subnormals).
inline double gelu_float_gauss(double a) noexcept {
    constexpr double kShift = 6755399441055744.0;          // 1.5 * 2^52
    constexpr double kHalfLog2e = 0.72134752044448170368;  // log2(e) / 2
    constexpr double kLn2 = 0.69314718055994530942;
    const double a2 = a * a;  // exact: a has 24 significant bits
    const double k = a2 * -kHalfLog2e + kShift;
    const double n = k - kShift;
    const double r = a2 * -0.5 - n * kLn2;
    const double p = horner(gelu_float_coeffs::kExp, r);
    std::uint64_t bits;
    std::memcpy(&bits, &k, sizeof bits);
    bits = (bits + 1023u) << 52;  // the low bits of k hold n (two's complement)
    double scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/// Φ(-a) for a in [0, 15.5] (a float) and sets gauss = e^{-a²/2}: relative error about 1.5e-8
/// (the two fits'), which with the final rounding keeps float GELU within 1 ulp.
inline double gelu_float_tail(double a, double& gauss) noexcept {
    gauss = gelu_float_gauss(a);
    const double t = (a - 3.0) / (a + 3.0);
    return gauss * horner(gelu_float_coeffs::kTail, t);
}

/// Exact GELU x Φ(x) of a float, within 1 ulp of the correctly rounded result (tested over every
/// float): -|x| Φ(-|x|) for x < 0, |x| - |x| Φ(-|x|) otherwise (Φ(-|x|) <= 1/2: no
/// cancellation), each in double and rounded once; x itself from 15.5 on (Φ(x) is 1 to float's
/// precision), which also gives +inf for +inf and NaN for NaN. -inf and -0 give -0.
inline float gelu_float(float x) noexcept {
    const float af = gelu_float_abs(x);
    const double a = static_cast<double>(af);
    double gauss;
    const double q = gelu_float_tail(a, gauss);
    const double aq = a * q;
    const float left = static_cast<float>(aq);
    const float right = std::copysign(static_cast<float>(a - aq), x);  // -0 for -0
    return pick_float(x < 0.0f, -left, pick_float(af < 15.5f, right, x));
}

/// GELU'(x) = Φ(x) + x φ(x) of a float, in double (absolute error about 1e-8); the limits 0 and
/// 1 at -inf and +inf, NaN for NaN.
inline double gelu_float_derivative(float x) noexcept {
    constexpr double kInvSqrtTwoPi = 0.39894228040143267794;  // 1 / √(2π)
    const float af = gelu_float_abs(x);
    const double a = static_cast<double>(af);
    double gauss;
    const double q = gelu_float_tail(a, gauss);
    const double cdf = pick(x < 0.0f, q, 1.0 - q);
    const double xs = static_cast<double>(pick_float(x != x, x, std::copysign(af, x)));
    return cdf + xs * kInvSqrtTwoPi * gauss;
}

}  // namespace headwise::detail
