// SPDX-License-Identifier: MIT
// QK and OV circuits (layers/attention/circuits.hpp) against the module's own scores and outputs.
#include <headwise/headwise.hpp>

#include <Eigen/LU>   // Eigen::FullPivLU
#include <Eigen/SVD>  // Eigen::JacobiSVD

#include <cmath>      // std::log, std::sqrt
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include "support/catch.hpp"
#include "support/mha_random.hpp"

namespace test_mha_circuits {

using namespace headwise;

namespace {

using Mat = RowMatrix<double>;

struct CircuitCase {
    const char* name;
    Index E, H, Hkv, kdim, vdim;
    bool bias, bias_kv, zero_attn;
    double scale;  // 0: the default 1 / sqrt(D)
    bool rotary;
    Index head_dim;  // 0: E / H
};

MultiheadAttentionOptions options_of(const CircuitCase& c, Projection p) {
    MultiheadAttentionOptions o;
    o.embed_dim = c.E;
    o.num_heads = c.H;
    o.num_kv_heads = c.Hkv;
    o.kdim = c.kdim;
    o.vdim = c.vdim;
    o.bias = c.bias;
    o.add_bias_kv = c.bias_kv;
    o.add_zero_attn = c.zero_attn;
    if (c.scale != 0.0) o.scale = c.scale;
    o.rotary.enabled = c.rotary;
    o.head_dim = c.head_dim;
    o.projection = p;
    return o;
}

Mat batch_slice(const Tensor<double>& t, Index b) {  // [B, N, F] -> row block b, [N, F]
    const Index N = t.shape()[1], F = t.shape()[2];
    return Mat(t.view().reshape(Shape{t.shape()[0] * N, F}).matrix().middleRows(b * N, N));
}

Mat head_probabilities(const Tensor<double>& w, Index b, Index h) {  // [B, H, L, Sx] -> [L, Sx]
    const Index H = w.shape()[1], L = w.shape()[2], Sx = w.shape()[3];
    return Mat(Eigen::Map<const Mat>(w.data() + ((b * H + h) * L) * Sx, L, Sx));
}

// The plain scores of one head from its own weights: scale (x_q W_Q^T + b_Q)(x_k W_K^T + b_K)^T,
// then bias_k's column and the zero key's.
Mat reference_scores(const MultiheadAttention<double>& m, Index h, const Mat& xq, const Mat& xk) {
    const MultiheadAttentionOptions& o = m.options();
    const Index D = m.head_dim();
    const HeadParameters<const double> hp = m.head(h);
    const Mat Wq = hp.q_weight().matrix(), Wk = hp.k_weight().matrix();
    Mat Q = xq * Wq.transpose(), K = xk * Wk.transpose();  // [L, D], [S, D]
    if (o.bias) {
        Q.rowwise() += Eigen::Map<const Eigen::RowVectorXd>(hp.q_bias().data(), D);
        K.rowwise() += Eigen::Map<const Eigen::RowVectorXd>(hp.k_bias().data(), D);
    }
    const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(D));
    const Index extra = (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
    Mat s = Mat::Zero(xq.rows(), xk.rows() + extra);
    s.leftCols(xk.rows()) = scale * Q * K.transpose();
    if (o.add_bias_kv) {
        const auto sd = m.state_dict();
        const Index g = m.num_heads() / m.num_kv_heads();
        const Eigen::Map<const Eigen::VectorXd> kb(sd.at("bias_k").data() + (h / g) * D, D);
        s.col(xk.rows()) = scale * Q * kb;
    }
    return s;
}

const CircuitCase kCases[] = {
    {"self, bias", 12, 3, 0, 0, 0, true, false, false, 0.0, false, 0},
    {"no bias", 12, 4, 0, 0, 0, false, false, false, 0.0, false, 0},
    {"kdim 5, vdim 7, scale 0.3", 12, 3, 0, 5, 7, true, false, false, 0.3, false, 0},
    {"grouped-query H 4 Hkv 2", 16, 4, 2, 0, 0, true, false, false, 0.0, false, 0},
    {"multi-query, bias_kv, zero_attn", 16, 4, 1, 0, 0, true, true, true, 0.0, false, 0},
    {"bias_kv, zero_attn, kdim 6", 12, 2, 0, 6, 0, true, true, true, 0.0, false, 0},
    // The inner width H D differs from E: wider (3 heads of 5 over E = 12), narrower with groups.
    {"head_dim 5 (H D = 15, E = 12)", 12, 3, 0, 0, 7, true, true, false, 0.0, false, 5},
    {"head_dim 2, H 4 Hkv 2 (H D = 8, E = 12)", 12, 4, 2, 5, 0, true, false, true, 0.0, false, 2},
};

}  // namespace

TEST_CASE("Every head's scores are x_q W_QK x_k^T plus the bias terms, its output the OV sum",
          "[circuits]") {
    const Projection projection =
        GENERATE(Projection::fused, Projection::separate, Projection::per_head);
    const CircuitCase c =
        GENERATE(Catch::Generators::from_range(std::begin(kCases), std::end(kCases)));
    CAPTURE(to_string(projection), c.name);
    MultiheadAttention<double> m(options_of(c, projection), 5);
    test::randomize_parameters(m, 11);
    m.eval();
    const Index B = 2, L = 4, S = 5;
    std::mt19937_64 rng(3);
    const Tensor<double> q = Tensor<double>::randn(Shape{B, L, c.E}, rng);
    const Tensor<double> k = Tensor<double>::randn(Shape{B, S, m.kdim()}, rng);
    const Tensor<double> v = Tensor<double>::randn(Shape{B, S, m.vdim()}, rng);
    AttentionMasks<double> masks;
    masks.need_weights = true;
    masks.average_attn_weights = false;
    const AttentionForward<double> f = m.forward(q, k, v, masks);
    const auto sd = m.state_dict();
    const Eigen::Map<const Eigen::RowVectorXd> b_out(
        c.bias ? sd.at("out_proj.bias").data() : nullptr, c.bias ? c.E : 0);

    for (Index b = 0; b < B; ++b) {
        const Mat xq = batch_slice(q, b), xk = batch_slice(k, b), xv = batch_slice(v, b);
        Mat y = Mat::Zero(L, c.E);  // [L, E]
        if (c.bias) y.rowwise() += b_out;
        for (Index h = 0; h < c.H; ++h) {
            CAPTURE(b, h);
            const QKCircuit<double> qk = qk_circuit(m, h);
            const OVCircuit<double> ov = ov_circuit(m, h);
            CHECK(qk.kv_head == h / (c.H / m.num_kv_heads()));
            const Mat s = qk.scores(xq, xk);  // [L, Sx]
            // The plain recomputation from the module's own per-head weights.
            CHECK((s - reference_scores(m, h, xq, xk)).cwiseAbs().maxCoeff() <= 1e-12);
            // The layer's probabilities: log P = s - logsumexp(s) per row.
            const Mat p = head_probabilities(f.attn_weights, b, h);
            REQUIRE(p.cols() == s.cols());
            const Mat d = p.array().log().matrix() - s;
            for (Index i = 0; i < L; ++i)
                CHECK((d.row(i).array() - d(i, 0)).abs().maxCoeff() <= 1e-12);
            // The terms that cancel in the softmax: a query-only term and a constant.
            if (c.bias) {
                const Mat bilinear_only = qk.weight.bilinear(xq, xk);  // [L, S]
                Mat with_key_term = bilinear_only;
                with_key_term.rowwise() += (xk * qk.key_term).transpose();
                const Mat cut = s.leftCols(S) - with_key_term;  // query term + constant
                for (Index i = 0; i < L; ++i)
                    CHECK((cut.row(i).array() - cut(i, 0)).abs().maxCoeff() <= 1e-12);
            }
            y += ov.contribution(p, xv);
        }
        const Mat out = batch_slice(f.output, b);
        CHECK((out - y).cwiseAbs().maxCoeff() <= 1e-12);
    }
}

TEST_CASE("Circuits: singular values from the factors, rank at most D, dense agrees",
          "[circuits]") {
    const Projection projection =
        GENERATE(Projection::fused, Projection::separate, Projection::per_head);
    const CircuitCase c =
        GENERATE(Catch::Generators::from_range(std::begin(kCases), std::end(kCases)));
    CAPTURE(to_string(projection), c.name);
    MultiheadAttention<double> m(options_of(c, projection), 8);
    test::randomize_parameters(m, 13);
    std::mt19937_64 rng(4);
    const Index D = m.head_dim();
    for (Index h = 0; h < c.H; ++h) {
        CAPTURE(h);
        for (const FactoredMatrix<double>& w : {qk_circuit(m, h).weight, ov_circuit(m, h).weight}) {
            const Mat dense = w.dense();
            CHECK(dense.rows() == c.E);
            CHECK(w.inner() == D);
            const Eigen::VectorXd ref = Eigen::JacobiSVD<Mat>(dense).singularValues();
            const Eigen::VectorXd sv = w.singular_values();
            REQUIRE(sv.size() == std::min({dense.rows(), dense.cols(), D}));
            CHECK((sv - ref.head(sv.size())).cwiseAbs().maxCoeff() <= 1e-10);
            if (ref.size() > sv.size())
                CHECK(ref.tail(ref.size() - sv.size()).cwiseAbs().maxCoeff() <= 1e-10);
            Eigen::FullPivLU<Mat> lu(dense);
            lu.setThreshold(1e-10);
            CHECK(lu.rank() <= D);
            // apply_to_rows and bilinear use the factors only; the dense matrix agrees.
            const Mat x = Mat::NullaryExpr(3, dense.cols(), [&] { return normal(rng); });
            const Mat z = Mat::NullaryExpr(2, dense.rows(), [&] { return normal(rng); });
            CHECK((w.apply_to_rows(x) - x * dense.transpose()).cwiseAbs().maxCoeff() <= 1e-12);
            CHECK((w.bilinear(z, x) - z * dense * x.transpose()).cwiseAbs().maxCoeff() <= 1e-12);
        }
    }
}

TEST_CASE("Rotary modules: the QK circuit of positions m and n, the OV circuit as without",
          "[circuits]") {
    const RopeConvention convention =
        GENERATE(RopeConvention::rotate_half, RopeConvention::interleaved);
    const bool extra_keys = GENERATE(false, true);
    CAPTURE(to_string(convention), extra_keys);
    CircuitCase c{"rotary", 16, 4, 2, 0, 0, true, extra_keys, extra_keys, 0.0, true, 0};
    MultiheadAttentionOptions o = options_of(c, Projection::separate);
    o.rotary.convention = convention;
    o.rotary.scaling_factor = 1.5;
    o.rotary.theta = 100.0;
    MultiheadAttention<double> m(o, 5);
    test::randomize_parameters(m, 17);
    m.eval();
    CHECK_THROWS_AS(qk_circuit(m, 0), std::invalid_argument);
    CHECK_THROWS_WITH(qk_circuit(m, 0),
                      "headwise::qk_circuit: module: options.rotary.enabled must be false (with "
                      "rotary positions the score between query position m and key position n "
                      "is x_q scale W_Q^T R_(n-m) W_K x_k^T, one bilinear form per offset: pass "
                      "the positions), got true");
    const Index L = 4, S = 6;
    std::mt19937_64 rng(6);
    const Tensor<double> q = Tensor<double>::randn(Shape{1, L, c.E}, rng);
    const Tensor<double> kv = Tensor<double>::randn(Shape{1, S, c.E}, rng);
    AttentionMasks<double> masks;
    masks.need_weights = true;
    masks.average_attn_weights = false;
    const AttentionForward<double> f = m.forward(q, kv, kv, masks);
    const Mat xq = batch_slice(q, 0), xk = batch_slice(kv, 0);
    const auto sd = m.state_dict();
    Mat y = Mat::Zero(L, c.E);
    y.rowwise() += Eigen::Map<const Eigen::RowVectorXd>(sd.at("out_proj.bias").data(), c.E);
    for (Index h = 0; h < c.H; ++h) {
        CAPTURE(h);
        // Query i sits at position i, key j at j: each score from the circuit of (i, j).
        const Mat p = head_probabilities(f.attn_weights, 0, h);  // [L, Sx]
        Mat s(L, p.cols());
        for (Index i = 0; i < L; ++i)
            for (Index j = 0; j < S; ++j) {
                const Mat sij = qk_circuit(m, h, i, j).scores(xq.row(i), xk.row(j));  // [1, 1+]
                s(i, j) = sij(0, 0);
                if (j == 0) s.row(i).tail(p.cols() - S) = sij.row(0).tail(p.cols() - S);
            }
        const Mat d = p.array().log().matrix() - s;
        for (Index i = 0; i < L; ++i) CHECK((d.row(i).array() - d(i, 0)).abs().maxCoeff() <= 1e-12);
        // The key-input part depends on n - m only.
        const QKCircuit<double> a = qk_circuit(m, h, 1, 4), b = qk_circuit(m, h, 3, 6);
        CHECK((a.weight.dense() - b.weight.dense()).cwiseAbs().maxCoeff() <= 1e-12);
        CHECK((a.key_term - b.key_term).cwiseAbs().maxCoeff() <= 1e-12);
        CHECK(std::abs(a.constant - b.constant) <= 1e-12);
        CHECK((a.weight.dense() - qk_circuit(m, h, 1, 1).weight.dense()).cwiseAbs().maxCoeff() >
              1e-3);
        // Values are not rotated: the output is still the OV sum over the layer's probabilities.
        y += ov_circuit(m, h).contribution(p, xk);
    }
    CHECK((batch_slice(f.output, 0) - y).cwiseAbs().maxCoeff() <= 1e-12);
}

TEST_CASE("Circuits: errors name the function, the argument and the value", "[circuits]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    const MultiheadAttention<double> m(o, 1);
    CHECK_THROWS_AS(qk_circuit(m, 2), std::invalid_argument);
    CHECK_THROWS_WITH(qk_circuit(m, 2), "headwise::qk_circuit: head: must be in [0, 2), got 2");
    CHECK_THROWS_WITH(qk_circuit(m, -1), "headwise::qk_circuit: head: must be in [0, 2), got -1");
    CHECK_THROWS_WITH(ov_circuit(m, 2), "headwise::ov_circuit: head: must be in [0, 2), got 2");
    CHECK_THROWS_WITH(qk_circuit(m, 2, 0, 0),
                      "headwise::qk_circuit: head: must be in [0, 2), got 2");
    CHECK_THROWS_WITH(qk_circuit(m, 0, -1, 0),
                      "headwise::qk_circuit: query_position: must be at least 0, got -1");
    CHECK_THROWS_WITH(qk_circuit(m, 0, 0, -3),
                      "headwise::qk_circuit: key_position: must be at least 0, got -3");
    // Without rotary the positions change nothing.
    CHECK((qk_circuit(m, 1, 2, 7).weight.dense() - qk_circuit(m, 1).weight.dense())
              .cwiseAbs()
              .maxCoeff() == 0.0);
    const QKCircuit<double> qk = qk_circuit(m, 0);
    CHECK_THROWS_AS(qk.scores(Mat::Zero(3, 7), Mat::Zero(2, 8)), shape_error);
    CHECK_THROWS_WITH(qk.scores(Mat::Zero(3, 7), Mat::Zero(2, 8)),
                      "headwise::QKCircuit::scores: x_q: expected shape [L, 8], got [3, 7]");
    CHECK_THROWS_WITH(ov_circuit(m, 1).contribution(Mat::Zero(3, 9), Mat::Zero(5, 8)),
                      "headwise::OVCircuit::contribution: p: expected shape [L, S + appended] "
                      "with S = 5 and at most 2 appended keys, got [3, 9]");
    CHECK_THROWS_WITH(FactoredMatrix<double>(Mat::Zero(4, 2), Mat::Zero(3, 4)),
                      "headwise::FactoredMatrix: right: expected shape [2, n] (left is [4, 2]), "
                      "got [3, 4]");
    CHECK_THROWS_WITH(qk.weight.bilinear(Mat::Zero(1, 8), Mat::Zero(1, 3)),
                      "headwise::FactoredMatrix::bilinear: y: expected shape [m, 8], got [1, 3]");
}

}  // namespace test_mha_circuits
