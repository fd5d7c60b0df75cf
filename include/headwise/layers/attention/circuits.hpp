// SPDX-License-Identifier: MIT
// A MultiheadAttention head's QK and OV circuits, held as the low-rank factors they are made of.
#pragma once

#include <Eigen/Core>
#include <Eigen/QR>   // Eigen::HouseholderQR
#include <Eigen/SVD>  // Eigen::JacobiSVD

#include <algorithm>  // std::min
#include <cstddef>    // std::size_t
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../../config.hpp"
#include "../../detail/compiled_templates.hpp"
#include "../../error.hpp"
#include "../../ops/rope.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "detail/attention_options.hpp"
#include "head_parameters.hpp"
#include "multihead_attention.hpp"

namespace headwise {

/// M = left() right(), left [rows, inner], right [inner, cols]: a matrix of rank at most inner,
/// kept as its two factors. Every operation works on the factors, O((rows + cols) inner) per
/// vector; only dense() forms the rows x cols matrix.
template <class T>
class FactoredMatrix {
public:
    using Matrix = RowMatrix<T>;
    using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

    /// The 0 x 0 matrix.
    FactoredMatrix() = default;
    /// Throws shape_error unless left.cols() == right.rows().
    FactoredMatrix(Matrix left, Matrix right);

    Index rows() const noexcept { return left_.rows(); }
    Index cols() const noexcept { return right_.cols(); }
    /// The inner size: the rank is at most this.
    Index inner() const noexcept { return left_.cols(); }
    const Matrix& left() const noexcept { return left_; }
    const Matrix& right() const noexcept { return right_; }

    /// M itself, [rows, cols]: the only call that forms it.
    Matrix dense() const { return left_ * right_; }
    /// M applied to each row of x [n, cols]: x M^T, [n, rows].
    Matrix apply_to_rows(const Eigen::Ref<const Matrix>& x) const;
    /// The bilinear form of every pair of rows: x M y^T, x [n, rows], y [m, cols] -> [n, m].
    Matrix bilinear(const Eigen::Ref<const Matrix>& x, const Eigen::Ref<const Matrix>& y) const;
    /// The singular values of M, descending, min(rows, cols, inner) of them (the others are 0),
    /// from the factors in O((rows + cols) inner^2): left = Q1 R1 and right^T = Q2 R2 (QR), so
    /// M = Q1 (R1 R2^T) Q2^T has the singular values of the small inner x inner product R1 R2^T.
    Vector singular_values() const;

private:
    Matrix left_;   // [rows, inner]
    Matrix right_;  // [inner, cols]
};

/// Head i's QK circuit (Elhage et al. 2021, "A Mathematical Framework for Transformer
/// Circuits"): the pre-softmax score of a query input x_q [E] against a key input x_k [kdim] is
///   s(x_q, x_k) = scale (W_i^Q x_q + b_i^Q) . (W_i^K x_k + b_i^K)
///               = x_q W_QK x_k^T + x_q . query_term + key_term . x_k + constant,
/// W_QK = scale (W_i^Q)^T W_i^K [E, kdim], of rank <= D, kept factored as
/// (scale (W_i^Q)^T) [E, D] times W_i^K [D, kdim] (PyTorch's (out, in) layouts: W_i^Q is
/// head(i).q_weight(), [D, E]). Of the bias terms, only key_term changes the attention: the
/// query term and the constant add the same amount to every score of a query row, and the
/// softmax of a row does not change when a constant is added to it. With grouped-query attention
/// W_i^K, b_i^K are those of the key/value head the query head reads (kv_head).
template <class T>
struct QKCircuit {
    using Matrix = RowMatrix<T>;
    using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

    Index head = 0;            // the query head i
    Index kv_head = 0;         // the key/value head it reads: i / (H / Hkv)
    T scale = T(0);            // the module's: options.scale, or 1 / sqrt(D)
    FactoredMatrix<T> weight;  // W_QK [E, kdim]
    bool has_bias = false;     // options.bias; without it the terms below are zero
    Vector query_term;  // [E] scale (W_i^Q)^T b_i^K: x_q . query_term, same for every key: cancels
    Vector key_term;    // [kdim] scale (W_i^K)^T b_i^Q: key_term . x_k: changes the softmax
    T constant = T(0);  // scale b_i^Q . b_i^K, same for every score: cancels
    // add_bias_kv: a key with no input, bias_k's row k_b [D] of kv_head, appended after the S
    // keys; its score is x_q . bias_k_query_term + bias_k_constant, which does change the
    // softmax (it competes with the real keys). add_zero_attn: a zero key after it, score 0.
    bool has_bias_k = false;
    Vector bias_k_query_term;  // [E] scale (W_i^Q)^T k_b (empty without add_bias_kv)
    T bias_k_constant = T(0);  // scale b_i^Q . k_b
    bool has_zero_attn = false;

    /// The scores the layer computes before its masks and softmax, for query inputs x_q [L, E]
    /// against key inputs x_k [S, kdim]: [L, S + appended], the S keys' scores followed by
    /// bias_k's column and the zero key's (each when the module has it).
    Matrix scores(const Eigen::Ref<const Matrix>& x_q, const Eigen::Ref<const Matrix>& x_k) const;
};

/// Head i's OV circuit: what the head writes to the output for each value input x_v [vdim] it
/// attends, W_OV = W^O_i W_i^V [E, vdim] of rank <= D, kept factored as W^O_i [E, D] (columns
/// i D .. i D + D - 1 of out_proj.weight) times W_i^V [D, vdim] (head(i).v_weight(); with
/// grouped-query attention the kv_head's). The layer's output is
///   y = b^O + sum_i [ P_i[:, :S] x_v W_OV^T + m_i bias_term^T + P_i[:, S] bias_v_term^T ],
/// P_i the head's attention probabilities [L, S + appended], m_i the probability each query row
/// puts on the S real keys (1 without appended keys, unless the row is fully masked: 0), the
/// bias_v column present with add_bias_kv. The zero-attention value adds nothing. The values are
/// never rotated, so the OV circuit holds with rotary positions too.
template <class T>
struct OVCircuit {
    using Matrix = RowMatrix<T>;
    using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

    Index head = 0;
    Index kv_head = 0;
    FactoredMatrix<T> weight;  // W_OV [E, vdim]
    bool has_bias = false;
    Vector bias_term;  // [E] W^O_i b_i^V (zero without bias): weighted by the real keys' mass
    bool has_bias_v = false;
    Vector bias_v_term;  // [E] W^O_i v_b, v_b bias_v's row of kv_head (empty without add_bias_kv)

    /// The head's contribution to the output, [L, E], from its probabilities p [L, S + appended]
    /// (as forward returns them with need_weights and average_attn_weights = false) and the value
    /// inputs x_v [S, vdim]; the sum over heads plus out_proj.bias is the layer's output.
    Matrix contribution(const Eigen::Ref<const Matrix>& p,
                        const Eigen::Ref<const Matrix>& x_v) const;
};

/// Head `head`'s QK circuit, read from the module's current weights (copied: later changes to the
/// module do not reach it). For a bf16 module, from its float weights. Throws
/// std::invalid_argument for a head outside [0, num_heads) and for a module with
/// options.rotary.enabled, whose scores depend on the positions (take the overload below).
/// Throws std::logic_error when the float weights are released.
template <class T>
QKCircuit<T> qk_circuit(const MultiheadAttention<T>& module, Index head);

/// Head `head`'s QK circuit between a query at position m = query_position and a key at position
/// n = key_position (forward's positions: query i is at i, key j at j). With options.rotary the
/// rotated query R_m q and key R_n k score (R_m q) . (R_n k) = q^T R_m^T R_n k, R_m^T R_n =
/// R_(n-m), so weight = scale (W_i^Q)^T R_(n-m) W_i^K and the bias terms are rotated likewise (they
/// depend on n - m only); bias_k's column, an unrotated key, depends on m alone: bias_k_query_term
/// = scale (W_i^Q)^T R_m^T k_b. Without rotary the positions change nothing. Throws
/// std::invalid_argument for a negative position or a head outside [0, num_heads).
template <class T>
QKCircuit<T> qk_circuit(const MultiheadAttention<T>& module, Index head, Index query_position,
                        Index key_position);

/// Head `head`'s OV circuit (any module, rotary included: values are not rotated). Throws
/// std::invalid_argument for a head outside [0, num_heads), std::logic_error when the float
/// weights are released.
template <class T>
OVCircuit<T> ov_circuit(const MultiheadAttention<T>& module, Index head);

// ---- definitions -----------------------------------------------------------------------------

namespace detail {

template <class T>
void check_circuit_head(const char* fn, const MultiheadAttention<T>& m, Index head) {
    if (head < 0 || head >= m.num_heads())
        throw_invalid_argument(fn, "head", "must be in [0, " + std::to_string(m.num_heads()) + ")",
                               std::to_string(head));
}

/// A parameter's value by its state_dict name (out_proj.weight, bias_k, ...), as a view.
template <class T>
TensorView<const T> circuit_parameter(const MultiheadAttention<T>& m, const std::string& name) {
    for (const Parameter<const T>& p : m.parameters())
        if (p.name == name) return p.value;
    HEADWISE_ASSERT(false);
    return {};
}

template <class T>
RowMatrix<T> as_row_matrix(TensorView<const T> t, Index rows, Index cols) {
    return RowMatrix<T>(t.reshape(Shape{rows, cols}).matrix());
}

template <class T>
Eigen::Matrix<T, Eigen::Dynamic, 1> as_vector(TensorView<const T> t, Index offset, Index n) {
    return Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(t.data() + offset, n);
}

}  // namespace detail

template <class T>
FactoredMatrix<T>::FactoredMatrix(Matrix left, Matrix right)
    : left_(std::move(left)), right_(std::move(right)) {
    if (left_.cols() != right_.rows())
        throw shape_error("headwise::FactoredMatrix", "right",
                          "[" + std::to_string(left_.cols()) + ", n] (left is " +
                              Shape{left_.rows(), left_.cols()}.str() + ")",
                          Shape{right_.rows(), right_.cols()});
}

template <class T>
RowMatrix<T> FactoredMatrix<T>::apply_to_rows(const Eigen::Ref<const Matrix>& x) const {
    if (x.cols() != cols())
        throw shape_error("headwise::FactoredMatrix::apply_to_rows", "x",
                          "[n, " + std::to_string(cols()) + "]", Shape{x.rows(), x.cols()});
    const Matrix xr = x * right_.transpose();  // [n, inner]
    return xr * left_.transpose();             // [n, rows]
}

template <class T>
RowMatrix<T> FactoredMatrix<T>::bilinear(const Eigen::Ref<const Matrix>& x,
                                         const Eigen::Ref<const Matrix>& y) const {
    constexpr const char* fn = "headwise::FactoredMatrix::bilinear";
    if (x.cols() != rows())
        throw shape_error(fn, "x", "[n, " + std::to_string(rows()) + "]",
                          Shape{x.rows(), x.cols()});
    if (y.cols() != cols())
        throw shape_error(fn, "y", "[m, " + std::to_string(cols()) + "]",
                          Shape{y.rows(), y.cols()});
    const Matrix a = x * left_;               // [n, inner]
    const Matrix b = y * right_.transpose();  // [m, inner]
    return a * b.transpose();                 // [n, m]
}

template <class T>
typename FactoredMatrix<T>::Vector FactoredMatrix<T>::singular_values() const {
    // R factor of a [m, r] matrix: its top min(m, r) rows, upper triangular, [min(m, r), r].
    auto r_factor = [](const Matrix& a) {
        const Eigen::HouseholderQR<Matrix> qr(a);
        const Index k = std::min(a.rows(), a.cols());
        Matrix r = qr.matrixQR().topRows(k).template triangularView<Eigen::Upper>();
        return r;
    };
    const Matrix r1 = r_factor(left_);                       // [k1, inner]
    const Matrix r2 = r_factor(Matrix(right_.transpose()));  // [k2, inner]
    const Matrix small = r1 * r2.transpose();                // [k1, k2]
    return Eigen::JacobiSVD<Matrix>(small).singularValues();
}

template <class T>
RowMatrix<T> QKCircuit<T>::scores(const Eigen::Ref<const Matrix>& x_q,
                                  const Eigen::Ref<const Matrix>& x_k) const {
    constexpr const char* fn = "headwise::QKCircuit::scores";
    if (x_q.cols() != weight.rows())
        throw shape_error(fn, "x_q", "[L, " + std::to_string(weight.rows()) + "]",
                          Shape{x_q.rows(), x_q.cols()});
    if (x_k.cols() != weight.cols())
        throw shape_error(fn, "x_k", "[S, " + std::to_string(weight.cols()) + "]",
                          Shape{x_k.rows(), x_k.cols()});
    const Index L = x_q.rows(), S = x_k.rows();
    const Index extra = (has_bias_k ? 1 : 0) + (has_zero_attn ? 1 : 0);
    Matrix s(L, S + extra);  // [L, S + extra]
    s.leftCols(S) = weight.bilinear(x_q, x_k);
    if (has_bias) {
        const Vector by_query = x_q * query_term;  // [L]
        const Vector by_key = x_k * key_term;      // [S]
        s.leftCols(S).colwise() += by_query;
        s.leftCols(S).rowwise() += by_key.transpose();
        s.leftCols(S).array() += constant;
    }
    Index col = S;
    if (has_bias_k) s.col(col++) = (x_q * bias_k_query_term).array() + bias_k_constant;
    if (has_zero_attn) s.col(col++).setZero();
    return s;
}

template <class T>
RowMatrix<T> OVCircuit<T>::contribution(const Eigen::Ref<const Matrix>& p,
                                        const Eigen::Ref<const Matrix>& x_v) const {
    constexpr const char* fn = "headwise::OVCircuit::contribution";
    if (x_v.cols() != weight.cols())
        throw shape_error(fn, "x_v", "[S, " + std::to_string(weight.cols()) + "]",
                          Shape{x_v.rows(), x_v.cols()});
    const Index S = x_v.rows();
    const Index extra = p.cols() - S;
    if (extra < 0 || extra > 2)
        throw shape_error(
            fn, "p",
            "[L, S + appended] with S = " + std::to_string(S) + " and at most 2 appended keys",
            Shape{p.rows(), p.cols()});
    const Matrix v = weight.apply_to_rows(x_v);  // [S, E]: x_v W_OV^T
    Matrix y = p.leftCols(S) * v;                // [L, E]
    if (has_bias) {
        const Vector mass = p.leftCols(S).rowwise().sum();  // [L]
        y += mass * bias_term.transpose();
    }
    if (has_bias_v && extra >= 1) y += p.col(S) * bias_v_term.transpose();
    return y;
}

namespace detail {

/// R_p [D, D], the rotation forward applies to a query or key row at position p (ops/rope.hpp),
/// as a matrix: q_rotated = R_p q. Built by rotating the rows of the identity, which gives R_p^T.
template <class T>
RowMatrix<T> rotation_matrix(const RotaryEmbedding& rotary, Index D, Index position) {
    const std::vector<Index> positions(static_cast<std::size_t>(D), position);
    RowMatrix<T> Cos(D, D / 2), Sin(D, D / 2);  // [D, D/2]: one row per rotated row
    ops::rope_tables<T>(positions.data(), rotary.theta, rotary.scaling_factor, rotary.scaling, Cos,
                        Sin);
    const RowMatrix<T> I = RowMatrix<T>::Identity(D, D);
    RowMatrix<T> Rt(D, D);  // [D, D]: row r is R_p e_r  !! transposed !!
    ops::rope_forward<T>(I, Cos, Sin, rotary.convention, Rt);
    return Rt.transpose();
}

/// The QK circuit of scores scale (A (W_Q x + b_Q)) . (B (W_K y + b_K)): A, B the query's and the
/// key's rotations (null: none), so that with M = A^T B the score is
/// scale (W_Q x + b_Q)^T M (W_K y + b_K); bias_k, unrotated, meets A only.
template <class T>
QKCircuit<T> make_qk_circuit(const MultiheadAttention<T>& m, Index head, const RowMatrix<T>* A,
                             const RowMatrix<T>* B) {
    using Matrix = RowMatrix<T>;
    using Vector = typename QKCircuit<T>::Vector;
    const MultiheadAttentionOptions& o = m.options();
    const Index E = m.embed_dim(), D = m.head_dim(), kdim = m.kdim();
    const HeadParameters<const T> hp = m.head(head);
    const Matrix Wq = as_row_matrix<T>(hp.q_weight(), D, E);                            // [D, E]
    const Matrix Wk = as_row_matrix<T>(hp.k_weight(), D, kdim);                         // [D, kdim]
    const Matrix M = A ? Matrix(A->transpose() * *B) : Matrix(Matrix::Identity(D, D));  // [D, D]
    const T scale = attention_scale<T>(o);
    const Matrix left = scale * (Wq.transpose() * M);  // [E, D]
    QKCircuit<T> c;
    c.head = head;
    c.kv_head = head / (m.num_heads() / m.num_kv_heads());
    c.scale = scale;
    c.weight = FactoredMatrix<T>(left, Wk);
    c.has_bias = o.bias;
    c.query_term = Vector::Zero(E);
    c.key_term = Vector::Zero(kdim);
    Vector bq = Vector::Zero(D);
    if (o.bias) {
        bq = as_vector<T>(hp.q_bias(), 0, D);
        const Vector bk = as_vector<T>(hp.k_bias(), 0, D);
        c.query_term = left * bk;                                      // [E]
        c.key_term = scale * (Wk.transpose() * (M.transpose() * bq));  // [kdim]
        c.constant = scale * bq.dot(M * bk);
    }
    if (o.add_bias_kv) {
        c.has_bias_k = true;
        Vector kb = as_vector<T>(circuit_parameter(m, "bias_k"), c.kv_head * D, D);  // [D]
        if (A) kb = (A->transpose() * kb).eval();
        c.bias_k_query_term = scale * (Wq.transpose() * kb);  // [E]
        c.bias_k_constant = scale * bq.dot(kb);
    }
    c.has_zero_attn = o.add_zero_attn;
    return c;
}

}  // namespace detail

template <class T>
QKCircuit<T> qk_circuit(const MultiheadAttention<T>& m, Index head) {
    constexpr const char* fn = "headwise::qk_circuit";
    detail::check_circuit_head(fn, m, head);
    if (m.options().rotary.enabled)
        throw std::invalid_argument(
            std::string(fn) +
            ": module: options.rotary.enabled must be false (with rotary positions the score "
            "between query position m and key position n is x_q scale W_Q^T R_(n-m) W_K x_k^T, "
            "one bilinear form per offset: pass the positions), got true");
    return detail::make_qk_circuit<T>(m, head, nullptr, nullptr);
}

template <class T>
QKCircuit<T> qk_circuit(const MultiheadAttention<T>& m, Index head, Index query_position,
                        Index key_position) {
    constexpr const char* fn = "headwise::qk_circuit";
    detail::check_circuit_head(fn, m, head);
    if (query_position < 0)
        throw_invalid_argument(fn, "query_position", "must be at least 0",
                               std::to_string(query_position));
    if (key_position < 0)
        throw_invalid_argument(fn, "key_position", "must be at least 0",
                               std::to_string(key_position));
    const RotaryEmbedding& rotary = m.options().rotary;
    if (!rotary.enabled) return detail::make_qk_circuit<T>(m, head, nullptr, nullptr);
    const RowMatrix<T> A = detail::rotation_matrix<T>(rotary, m.head_dim(), query_position);
    const RowMatrix<T> B = detail::rotation_matrix<T>(rotary, m.head_dim(), key_position);
    return detail::make_qk_circuit<T>(m, head, &A, &B);
}

template <class T>
OVCircuit<T> ov_circuit(const MultiheadAttention<T>& m, Index head) {
    constexpr const char* fn = "headwise::ov_circuit";
    detail::check_circuit_head(fn, m, head);
    const MultiheadAttentionOptions& o = m.options();
    using Matrix = RowMatrix<T>;
    const Index E = m.embed_dim(), D = m.head_dim(), vdim = m.vdim();
    const HeadParameters<const T> hp = m.head(head);
    const Matrix Wv = detail::as_row_matrix<T>(hp.v_weight(), D, vdim);  // [D, vdim]
    const Matrix Wo =
        detail::as_row_matrix<T>(detail::circuit_parameter(m, "out_proj.weight"), E, m.inner_dim())
            .middleCols(head * D, D);  // [E, D]: W^O_i
    OVCircuit<T> c;
    c.head = head;
    c.kv_head = head / (m.num_heads() / m.num_kv_heads());
    c.weight = FactoredMatrix<T>(Wo, Wv);
    c.has_bias = o.bias;
    c.bias_term = OVCircuit<T>::Vector::Zero(E);
    if (o.bias) c.bias_term = Wo * detail::as_vector<T>(hp.v_bias(), 0, D);  // [E]
    if (o.add_bias_kv) {
        c.has_bias_v = true;
        c.bias_v_term =
            Wo * detail::as_vector<T>(detail::circuit_parameter(m, "bias_v"), c.kv_head * D, D);
    }
    return c;
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_CIRCUITS_TEMPLATES(C, F, T) \
    C(class, FactoredMatrix<T>)                     \
    C(struct, QKCircuit<T>)                         \
    C(struct, OVCircuit<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_CIRCUITS_TEMPLATES);
