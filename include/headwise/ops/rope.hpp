// SPDX-License-Identifier: MIT
// Rotary position embeddings (RoPE): the cos/sin tables and the rotation of query or key rows,
// forward and backward, on caller-provided matrices.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <algorithm>  // std::max, std::min, std::clamp
#include <cmath>    // std::cos, std::sin, std::pow, std::isfinite, std::log, std::floor, std::ceil
#include <string>   // std::to_string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "../config.hpp"
#include "../detail/number_string.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

// RoFormer (Su et al. 2021, Eq. 34): row x of a head's queries or keys [L, D] at position m is
// rotated pair by pair, pair i in [0, D/2) by the angle m theta_i, theta_i = base^(-2i / D):
//   y_a = x_a cos(m theta_i) - x_b sin(m theta_i)
//   y_b = x_b cos(m theta_i) + x_a sin(m theta_i)
// so that q_m . k_n depends on m - n only. Which two features form pair i is the convention.
// Linear scaling (position interpolation, Chen et al. 2023) divides the position by a factor:
// the angle is (m / factor) theta_i. The other scalings of RopeScaling change theta_i per pair
// (llama3, yarn) or the base with the sequence's length (dynamic), as Hugging Face's
// modeling_rope_utils computes them.
//
// Conventions of these kernels:
//  - The tables Cos, Sin [R, D/2] hold one row per row of X: row r of X is at the position that
//    row r of the tables was made for. One table serves every head of a call.
//  - The rotation is orthogonal, so its backward is the transposed rotation, by -angle.
//  - Both kernels WRITE their output (=): the output may be the very same matrix as the input
//    (in place, as the attention pipeline uses them), but must not partially overlap it.
//  - Shapes are checked in every build; a mismatch throws shape_error naming the argument.
//  - rope_tables takes the base and the factor MultiheadAttention's rotary options take (finite,
//    base > 1, factor >= 1) and throws std::invalid_argument for others, which would give NaN
//    (base 0, inf) or angles no model uses.

namespace headwise {

/// Which features of a head form the rotated pairs.
enum class RopeConvention {
    /// Pairs (i, i + D/2): the two halves of the head (Hugging Face's rotate_half, as in Llama,
    /// Mistral, Qwen, GPT-NeoX), the angle of pair i repeated over the halves.
    rotate_half,
    /// Pairs (2i, 2i + 1): neighbouring features (the RoFormer paper, GPT-J's rotate_every_two).
    interleaved,
};

inline const char* to_string(RopeConvention c) noexcept {
    switch (c) {
        case RopeConvention::rotate_half:
            return "rotate_half";
        case RopeConvention::interleaved:
            return "interleaved";
    }
    return "unknown";
}

/// How the frequencies theta_i are changed for contexts longer than the model was trained on
/// (Hugging Face's rope_type besides "default" and "linear", whose factor is
/// RotaryEmbedding::scaling_factor).
enum class RopeScalingType {
    none,
    /// Llama 3.1's frequency smoothing: pairs whose wavelength 2 pi / theta_i is longer than
    /// original_max_position / low_freq_factor turn factor times slower, those shorter than
    /// original_max_position / high_freq_factor stay, those between are interpolated by
    /// s = (original_max_position / wavelength - low_freq_factor) / (high_freq_factor -
    /// low_freq_factor): theta_i ((1 - s) / factor + s).
    llama3,
    /// Dynamic NTK scaling: for a call whose longest position is m, with n = max(m + 1,
    /// original_max_position) (Hugging Face's max_position_embeddings), the base becomes
    /// base (factor n / original_max_position - (factor - 1))^(D / (D - 2)). Each call's tables
    /// follow its own longest position (keys already cached keep their rotation).
    dynamic,
    /// YaRN (Peng et al. 2023): theta_i blended between theta_i / factor and theta_i by a ramp over
    /// the pairs between the correction dimensions of beta_fast and beta_slow rotations in
    /// original_max_position (floored and ceiled when `truncate`), and cos and sin multiplied by
    /// attention_factor.
    yarn,
};

inline const char* to_string(RopeScalingType t) noexcept {
    switch (t) {
        case RopeScalingType::none:
            return "none";
        case RopeScalingType::llama3:
            return "llama3";
        case RopeScalingType::dynamic:
            return "dynamic";
        case RopeScalingType::yarn:
            return "yarn";
    }
    return "unknown";
}

/// The parameters of a RopeScalingType (Hugging Face's rope_scaling / rope_parameters keys).
struct RopeScaling {
    RopeScalingType type = RopeScalingType::none;
    double factor = 1.0;              // finite, at least 1
    Index original_max_position = 0;  // original_max_position_embeddings; positive unless none
    double low_freq_factor = 1.0;     // llama3, positive
    double high_freq_factor = 4.0;    // llama3, above low_freq_factor
    double beta_fast = 32.0;          // yarn, positive
    double beta_slow = 1.0;           // yarn, positive
    bool truncate = true;             // yarn
    double attention_factor = 1.0;    // yarn: cos and sin multiplied by it; finite, positive
    /// Any type: empty, or one divisor per pair (D/2 of them, finite, positive) applied after the
    /// type's change, theta_i / frequency_factors[i] (llama.cpp's rope_freqs.weight, which its
    /// converter computes from Llama 3.1's "llama3" scaling as theta_i / theta_i(llama3)).
    std::vector<double> frequency_factors;

    friend bool operator==(const RopeScaling& a, const RopeScaling& b) noexcept {
        return a.type == b.type && a.factor == b.factor &&
               a.original_max_position == b.original_max_position &&
               a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
               a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
               a.truncate == b.truncate && a.attention_factor == b.attention_factor &&
               a.frequency_factors == b.frequency_factors;
    }
    friend bool operator!=(const RopeScaling& a, const RopeScaling& b) noexcept {
        return !(a == b);
    }
};

}  // namespace headwise

namespace headwise::ops {

/// Cos[r, i] = cos(a), Sin[r, i] = sin(a) for the angle a = (positions[r] / scaling_factor)
/// theta_i, theta_i = base^(-2i / D), with D = 2 Cos.cols(): rows r in [0, Cos.rows()),
/// `positions` holding Cos.rows() positions. Computed in double, then rounded to T. Throws
/// std::invalid_argument, before writing, unless base is finite and greater than 1 and
/// scaling_factor finite and at least 1 (as RotaryEmbedding's theta and scaling_factor), or when
/// `positions` is null with rows to fill; shape_error when Sin's shape is not Cos's.
template <class T>
void rope_tables(const Index* positions, double base, double scaling_factor, MatrixRef<T> Cos,
                 MatrixRef<T> Sin);

/// The same for the consecutive positions first, first + 1, ..., first + Cos.rows() - 1.
template <class T>
void rope_tables(Index first, double base, double scaling_factor, MatrixRef<T> Cos,
                 MatrixRef<T> Sin);

/// Both, with the frequencies changed by `scaling` (see RopeScalingType); throws
/// std::invalid_argument, before writing, for parameters check_rope_scaling refuses.
template <class T>
void rope_tables(const Index* positions, double base, double scaling_factor,
                 const RopeScaling& scaling, MatrixRef<T> Cos, MatrixRef<T> Sin);
template <class T>
void rope_tables(Index first, double base, double scaling_factor, const RopeScaling& scaling,
                 MatrixRef<T> Cos, MatrixRef<T> Sin);

/// theta_i for i in [0, D/2) (Hugging Face's inv_freq) under `scaling`, in double, for a call
/// whose longest position is max_position (read by RopeScalingType::dynamic only), divided by
/// scaling.frequency_factors[i] when it holds D/2 factors.
inline std::vector<double> rope_frequencies(double base, Index D, const RopeScaling& scaling,
                                            Index max_position);
/// The one theta_i of rope_frequencies, computed without allocating (decode fills its tables
/// on every step).
inline double rope_frequency(double base, Index D, const RopeScaling& scaling, Index max_position,
                             Index i);

/// Throws std::invalid_argument naming `fn` and `name`.<field> unless `scaling`'s parameters
/// are usable: a type that is an enumerator; frequency_factors finite and positive (their
/// number, D/2, is checked where D is known: rope_tables, MultiheadAttention's rotary options);
/// for every type but none a finite factor of at least 1 and a positive
/// original_max_position; llama3 0 < low_freq_factor < high_freq_factor; yarn positive
/// beta_fast, beta_slow and a finite positive attention_factor.
inline void check_rope_scaling(const char* fn, const std::string& name, const RopeScaling& scaling);

/// Y[R, D] = X[R, D] with each row r rotated by the angles of row r of Cos, Sin [R, D/2], pairs
/// taken by `convention`. Y may be X itself.
template <class T>
void rope_forward(ConstMatrixRef<T> X, ConstMatrixRef<T> Cos, ConstMatrixRef<T> Sin,
                  RopeConvention convention, MatrixRef<T> Y);

/// dX[R, D] from dY[R, D]: the transposed rotation, by the negated angles of the tables
///   dx_a = dy_a cos + dy_b sin,   dx_b = dy_b cos - dy_a sin.
/// Written, not accumulated; dX may be dY itself.
template <class T>
void rope_backward(ConstMatrixRef<T> dY, ConstMatrixRef<T> Cos, ConstMatrixRef<T> Sin,
                   RopeConvention convention, MatrixRef<T> dX);

// ---- definitions ----------------------------------------------------------------------------

}  // namespace headwise::ops

namespace headwise::detail {

/// Features (a, b) of pair i of a head of D features under `convention`.
inline void rope_pair(RopeConvention convention, Index i, Index D, Index& a, Index& b) noexcept {
    if (convention == RopeConvention::rotate_half) {
        a = i;
        b = i + D / 2;
    } else {
        a = 2 * i;
        b = 2 * i + 1;
    }
}

template <class T, class Position>
void rope_fill_tables(const char* fn, Position position, double base, double scaling_factor,
                      const RopeScaling& scaling, MatrixRef<T> Cos, MatrixRef<T> Sin) {
    // Cos [R, D/2], Sin [R, D/2]
    check_matrix(fn, "Sin", Sin, Cos.rows(), Cos.cols());
    // RotaryEmbedding's rules (check_rotary): base 0 makes theta_i = 0^(-2i / D) infinite and
    // the angles NaN (0 times inf at position 0); a base or factor that is not finite, likewise.
    if (!(std::isfinite(base) && base > 1.0))
        throw_invalid_argument(fn, "base", "must be finite and greater than 1", shortest_str(base));
    if (!(std::isfinite(scaling_factor) && scaling_factor >= 1.0))
        throw_invalid_argument(fn, "scaling_factor", "must be finite and at least 1",
                               shortest_str(scaling_factor));
    ops::check_rope_scaling(fn, "scaling", scaling);
    const Index R = Cos.rows(), half = Cos.cols();
    if (const auto n = static_cast<Index>(scaling.frequency_factors.size()); n != 0 && n != half)
        throw_invalid_argument(
            fn, "scaling.frequency_factors",
            "must be empty or hold one factor per pair (Cos.cols() = " + std::to_string(half) + ")",
            std::to_string(n) + " factors");
    Index longest = 0;  // the call's longest position (dynamic scaling's sequence length - 1)
    if (scaling.type == RopeScalingType::dynamic)
        for (Index r = 0; r < R; ++r) longest = std::max(longest, position(r));
    const double mscale = scaling.type == RopeScalingType::yarn ? scaling.attention_factor : 1.0;
    for (Index i = 0; i < half; ++i) {
        // theta_i, slowed down by the linear scaling factor (no allocation: decode fills the
        // tables on every step).
        const double t = ops::rope_frequency(base, 2 * half, scaling, longest, i) / scaling_factor;
        for (Index r = 0; r < R; ++r) {
            const double angle = static_cast<double>(position(r)) * t;
            Cos(r, i) = static_cast<T>(mscale * std::cos(angle));
            Sin(r, i) = static_cast<T>(mscale * std::sin(angle));
        }
    }
}

/// Rotates every pair of X into Y by the tables' angles, times `sign` (+1 forward, -1 backward).
template <class T>
void rope_rotate(const char* fn, const char* x_name, const char* y_name, ConstMatrixRef<T> X,
                 ConstMatrixRef<T> Cos, ConstMatrixRef<T> Sin, RopeConvention convention, T sign,
                 MatrixRef<T> Y) {
    // X [R, D], Cos [R, D/2], Sin [R, D/2], Y [R, D]
    const Index R = X.rows(), D = X.cols();
    if (D % 2 != 0)
        throw_invalid_argument(fn, x_name, "must have an even number of columns (pairs)",
                               Shape{R, D}.str());
    check_matrix(fn, "Cos", Cos, R, D / 2);
    check_matrix(fn, "Sin", Sin, R, D / 2);
    check_matrix(fn, y_name, Y, R, D);
    for (Index r = 0; r < R; ++r) {
        for (Index i = 0; i < D / 2; ++i) {
            Index a = 0, b = 0;
            rope_pair(convention, i, D, a, b);
            const T c = Cos(r, i), s = sign * Sin(r, i);
            const T xa = X(r, a), xb = X(r, b);  // both read before either is written (in place)
            Y(r, a) = xa * c - xb * s;
            Y(r, b) = xb * c + xa * s;
        }
    }
}

/// theta_i under `scaling`'s type alone (rope_frequency without frequency_factors).
inline double rope_type_frequency(double base, Index D, const RopeScaling& scaling,
                                  Index max_position, Index i) {
    const double d = static_cast<double>(D);
    const double factor = scaling.factor;
    const double original = static_cast<double>(scaling.original_max_position);
    if (scaling.type == RopeScalingType::dynamic) {
        // Hugging Face's _compute_dynamic_ntk_parameters: the base grows with the length.
        const double n = std::max(static_cast<double>(max_position) + 1.0, original);
        base *= std::pow(factor * n / original - (factor - 1.0), d / (d - 2.0));
    }
    const double t = std::pow(base, -2.0 * static_cast<double>(i) / d);  // base^(-2i / D)
    const double pi = 3.14159265358979323846;
    if (scaling.type == RopeScalingType::llama3) {
        // _compute_llama3_parameters: by wavelength, slowed down, kept, or interpolated.
        const double low_wavelength = original / scaling.low_freq_factor;
        const double high_wavelength = original / scaling.high_freq_factor;
        const double wavelength = 2.0 * pi / t;
        if (wavelength > low_wavelength) return t / factor;
        if (wavelength < high_wavelength) return t;
        const double s = (original / wavelength - scaling.low_freq_factor) /
                         (scaling.high_freq_factor - scaling.low_freq_factor);
        return (1.0 - s) * t / factor + s * t;
    }
    if (scaling.type == RopeScalingType::yarn) {
        // _compute_yarn_parameters: the pair where theta_i turns `rotations` times in the
        // original context, a ramp between those of beta_fast and beta_slow.
        const auto correction = [&](double rotations) {
            return d * std::log(original / (rotations * 2.0 * pi)) / (2.0 * std::log(base));
        };
        double low = correction(scaling.beta_fast), high = correction(scaling.beta_slow);
        if (scaling.truncate) {
            low = std::floor(low);
            high = std::ceil(high);
        }
        low = std::max(low, 0.0);
        high = std::min(high, d - 1.0);
        if (low == high) high += 0.001;  // as Hugging Face, against a zero-width ramp
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // share of the unscaled frequency
        return t / factor * (1.0 - extrapolation) + t * extrapolation;
    }
    return t;
}

}  // namespace headwise::detail

namespace headwise::ops {

inline void check_rope_scaling(const char* fn, const std::string& name,
                               const RopeScaling& scaling) {
    using headwise::detail::shortest_str;
    const auto field = [&](const char* f) { return name + "." + f; };
    for (std::size_t i = 0; i < scaling.frequency_factors.size(); ++i)
        if (const double f = scaling.frequency_factors[i]; !(std::isfinite(f) && f > 0.0))
            throw_invalid_argument(fn, name + ".frequency_factors[" + std::to_string(i) + "]",
                                   "must be finite and positive", shortest_str(f));
    switch (scaling.type) {
        case RopeScalingType::none:
            return;
        case RopeScalingType::llama3:
        case RopeScalingType::dynamic:
        case RopeScalingType::yarn:
            break;
        default:
            throw_invalid_argument(
                fn, field("type"), "must be none, llama3, dynamic or yarn",
                "RopeScalingType(" + std::to_string(static_cast<int>(scaling.type)) + ")");
    }
    if (!(std::isfinite(scaling.factor) && scaling.factor >= 1.0))
        throw_invalid_argument(fn, field("factor"), "must be finite and at least 1",
                               shortest_str(scaling.factor));
    if (scaling.original_max_position <= 0)
        throw_invalid_argument(fn, field("original_max_position"), "must be positive",
                               std::to_string(scaling.original_max_position));
    if (scaling.type == RopeScalingType::llama3 &&
        !(std::isfinite(scaling.low_freq_factor) && std::isfinite(scaling.high_freq_factor) &&
          scaling.low_freq_factor > 0.0 && scaling.high_freq_factor > scaling.low_freq_factor))
        throw_invalid_argument(fn, field("high_freq_factor"),
                               "must be finite and above low_freq_factor = " +
                                   shortest_str(scaling.low_freq_factor) + " > 0",
                               shortest_str(scaling.high_freq_factor));
    if (scaling.type == RopeScalingType::yarn) {
        for (auto [f, v] :
             {std::pair{"beta_fast", scaling.beta_fast}, std::pair{"beta_slow", scaling.beta_slow},
              std::pair{"attention_factor", scaling.attention_factor}})
            if (!(std::isfinite(v) && v > 0.0))
                throw_invalid_argument(fn, field(f), "must be finite and positive",
                                       shortest_str(v));
    }
}

inline double rope_frequency(double base, Index D, const RopeScaling& scaling, Index max_position,
                             Index i) {
    const double t = headwise::detail::rope_type_frequency(base, D, scaling, max_position, i);
    if (scaling.frequency_factors.empty()) return t;
    HEADWISE_ASSERT(static_cast<Index>(scaling.frequency_factors.size()) == D / 2);
    // llama.cpp's freq_factors (ggml_rope_ext): the pair's frequency divided by its factor.
    return t / scaling.frequency_factors[static_cast<std::size_t>(i)];
}

inline std::vector<double> rope_frequencies(double base, Index D, const RopeScaling& scaling,
                                            Index max_position) {
    std::vector<double> theta(static_cast<std::size_t>(D / 2));
    for (Index i = 0; i < D / 2; ++i)
        theta[static_cast<std::size_t>(i)] = rope_frequency(base, D, scaling, max_position, i);
    return theta;
}

template <class T>
void rope_tables(const Index* positions, double base, double scaling_factor,
                 const RopeScaling& scaling, MatrixRef<T> Cos, MatrixRef<T> Sin) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    if (positions == nullptr && Cos.rows() > 0)
        throw_invalid_argument("headwise::ops::rope_tables", "positions",
                               "must point to Cos.rows() positions",
                               "null for " + std::to_string(Cos.rows()) + " rows");
    detail::rope_fill_tables<T>(
        "headwise::ops::rope_tables", [positions](Index r) { return positions[r]; }, base,
        scaling_factor, scaling, Cos, Sin);
}

template <class T>
void rope_tables(Index first, double base, double scaling_factor, const RopeScaling& scaling,
                 MatrixRef<T> Cos, MatrixRef<T> Sin) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    detail::rope_fill_tables<T>(
        "headwise::ops::rope_tables", [first](Index r) { return first + r; }, base, scaling_factor,
        scaling, Cos, Sin);
}

template <class T>
void rope_tables(const Index* positions, double base, double scaling_factor, MatrixRef<T> Cos,
                 MatrixRef<T> Sin) {
    rope_tables<T>(positions, base, scaling_factor, RopeScaling{}, Cos, Sin);
}

template <class T>
void rope_tables(Index first, double base, double scaling_factor, MatrixRef<T> Cos,
                 MatrixRef<T> Sin) {
    rope_tables<T>(first, base, scaling_factor, RopeScaling{}, Cos, Sin);
}

template <class T>
void rope_forward(ConstMatrixRef<T> X, ConstMatrixRef<T> Cos, ConstMatrixRef<T> Sin,
                  RopeConvention convention, MatrixRef<T> Y) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    detail::rope_rotate<T>("headwise::ops::rope_forward", "X", "Y", X, Cos, Sin, convention, T(1),
                           Y);
}

template <class T>
void rope_backward(ConstMatrixRef<T> dY, ConstMatrixRef<T> Cos, ConstMatrixRef<T> Sin,
                   RopeConvention convention, MatrixRef<T> dX) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    // The rotation matrix is orthogonal: its transpose, the backward, rotates by -angle.
    detail::rope_rotate<T>("headwise::ops::rope_backward", "dY", "dX", dY, Cos, Sin, convention,
                           T(-1), dX);
}

}  // namespace headwise::ops
