// SPDX-License-Identifier: MIT
// Rotary position embeddings (RoPE): the cos/sin tables and the rotation of query or key rows,
// forward and backward, on caller-provided matrices.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <cmath>   // std::cos, std::sin, std::pow, std::isfinite
#include <string>  // std::to_string

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
// the angle is (m / factor) theta_i.
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
                      MatrixRef<T> Cos, MatrixRef<T> Sin) {
    // Cos [R, D/2], Sin [R, D/2]
    check_matrix(fn, "Sin", Sin, Cos.rows(), Cos.cols());
    // RotaryEmbedding's rules (check_rotary): base 0 makes theta_i = 0^(-2i / D) infinite and
    // the angles NaN (0 times inf at position 0); a base or factor that is not finite, likewise.
    if (!(std::isfinite(base) && base > 1.0))
        throw_invalid_argument(fn, "base", "must be finite and greater than 1", shortest_str(base));
    if (!(std::isfinite(scaling_factor) && scaling_factor >= 1.0))
        throw_invalid_argument(fn, "scaling_factor", "must be finite and at least 1",
                               shortest_str(scaling_factor));
    const Index R = Cos.rows(), half = Cos.cols();
    const double D = static_cast<double>(2 * half);
    for (Index i = 0; i < half; ++i) {
        // theta_i = base^(-2i / D), slowed down by the linear scaling factor.
        const double theta = std::pow(base, -2.0 * static_cast<double>(i) / D) / scaling_factor;
        for (Index r = 0; r < R; ++r) {
            const double angle = static_cast<double>(position(r)) * theta;
            Cos(r, i) = static_cast<T>(std::cos(angle));
            Sin(r, i) = static_cast<T>(std::sin(angle));
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

}  // namespace headwise::detail

namespace headwise::ops {

template <class T>
void rope_tables(const Index* positions, double base, double scaling_factor, MatrixRef<T> Cos,
                 MatrixRef<T> Sin) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    if (positions == nullptr && Cos.rows() > 0)
        throw_invalid_argument("headwise::ops::rope_tables", "positions",
                               "must point to Cos.rows() positions",
                               "null for " + std::to_string(Cos.rows()) + " rows");
    detail::rope_fill_tables<T>(
        "headwise::ops::rope_tables", [positions](Index r) { return positions[r]; }, base,
        scaling_factor, Cos, Sin);
}

template <class T>
void rope_tables(Index first, double base, double scaling_factor, MatrixRef<T> Cos,
                 MatrixRef<T> Sin) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    detail::rope_fill_tables<T>(
        "headwise::ops::rope_tables", [first](Index r) { return first + r; }, base, scaling_factor,
        Cos, Sin);
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
