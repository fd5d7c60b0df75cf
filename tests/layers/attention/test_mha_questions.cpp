// SPDX-License-Identifier: MIT
// The questions people ask about multi-head attention, answered by tests on the real module.
#include <headwise/headwise.hpp>

#include <Eigen/LU>  // Eigen::FullPivLU

#include <algorithm>  // std::max
#include <cmath>      // std::sqrt, std::log, std::abs

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/projections.hpp"

namespace test_mha_questions {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::MhaConfig;

namespace {

using Mat = RowMatrix<double>;
using headwise::test::kProjections;

Mat as_matrix(TensorView<const double> t) { return Mat(t.matrix()); }

}  // namespace

TEST_CASE("H separate per-head attentions, concatenated, compute what the fused layer computes",
          "[questions]") {
    // head_i = softmax((X W_i^Q)(Y W_i^K)^T / sqrt(D)) (Y W_i^V), MultiHead = Concat(head_i) W^O
    // (Vaswani et al. 2017, Eq. 1 and Section 3.2.2), written out here with one Eigen product
    // per head and per projection, against the module's single fused GEMM.
    MhaConfig c;
    c.B = 1;
    c.L = 5;
    c.S = 7;
    c.E = 16;
    c.H = 4;
    c.inputs = Inputs::kv_same;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> m(c.options(Projection::fused), 21);
    auto sd = m.state_dict();
    std::mt19937_64 rng(2);
    sd["in_proj_bias"] = Tensor<double>::randn(Shape{3 * c.E}, rng);
    sd["out_proj.bias"] = Tensor<double>::randn(Shape{c.E}, rng);
    m.load_state_dict(sd);
    m.eval();
    const Tensor<double> fused = m.forward(d.q, d.k, d.k).output;

    const Mat X = d.q.matrix();  // [L, E]
    const Mat Y = d.k.matrix();  // [S, E]
    const Index D = c.E / c.H;
    Mat concat(c.L, c.E);  // [L, E]
    for (Index i = 0; i < c.H; ++i) {
        const HeadParameters<double> head = m.head(i);
        // W_i^Q in the paper's E x D convention is the transpose of PyTorch's [D, E] rows.
        const Mat Wq = as_matrix(head.q_weight()).transpose(),
                  Wk = as_matrix(head.k_weight()).transpose(),
                  Wv = as_matrix(head.v_weight()).transpose();
        const Eigen::RowVectorXd bq = as_matrix(head.q_bias().reshape(Shape{1, D})),
                                 bk = as_matrix(head.k_bias().reshape(Shape{1, D})),
                                 bv = as_matrix(head.v_bias().reshape(Shape{1, D}));
        const Mat Q = (X * Wq).rowwise() + bq;                          // [L, D]
        const Mat K = (Y * Wk).rowwise() + bk;                          // [S, D]
        const Mat V = (Y * Wv).rowwise() + bv;                          // [S, D]
        Mat P = Q * K.transpose() / std::sqrt(static_cast<double>(D));  // [L, S]
        for (Index r = 0; r < P.rows(); ++r) {
            P.row(r).array() = (P.row(r).array() - P.row(r).maxCoeff()).exp();
            P.row(r) /= P.row(r).sum();
        }
        concat.middleCols(i * D, D) = P * V;
    }
    const Mat out =
        (concat * as_matrix(sd.at("out_proj.weight")).transpose()).rowwise() +
        Eigen::RowVectorXd(as_matrix(sd.at("out_proj.bias").view().reshape(Shape{1, c.E})));
    HEADWISE_CHECK_CLOSE(fused.view().reshape(Shape{c.L, c.E}), view(out.data(), Shape{c.L, c.E}),
                         1e-13);
}

TEST_CASE("H = 1 and H = 8 with the same weights compute different functions", "[questions]") {
    // The heads partition the E-dimensional dot product: one head scores q.k over all E
    // features; eight heads score eight D = E/8 blocks separately and softmax each. Same
    // parameters, different attention patterns, different outputs.
    MhaConfig one, eight;
    one.E = eight.E = 32;
    one.L = eight.L = 6;
    one.H = 1;
    eight.H = 8;
    const test::MhaData<double> d = test::make_data<double>(one);
    MultiheadAttention<double> m1(one.options(Projection::fused), 5);
    MultiheadAttention<double> m8(eight.options(Projection::fused), 0);
    m8.load_state_dict(m1.state_dict());  // the very same numbers
    AttentionMasks<double> masks;
    masks.need_weights = true;
    const auto f1 = m1.forward(d.q, d.q, d.q, masks);
    const auto f8 = m8.forward(d.q, d.q, d.q, masks);
    CHECK(test::scaled_difference(f1.output, f8.output).rel > 1e-2);
    CHECK(test::scaled_difference(f1.attn_weights, f8.attn_weights).rel > 1e-2);

    // What does hold: the single head's raw score q.k is the sum of the eight heads' raw scores
    // q_h.k_h. The module's weights show it: log P[i, j] - log P[i, 0] is the score difference
    // s[i, j] - s[i, 0], and s = q.k / sqrt(D), so
    //   sqrt(32) (log P1[i, j] - log P1[i, 0]) = sum_h sqrt(4) (log P8_h[i, j] - log P8_h[i, 0]).
    masks.average_attn_weights = false;
    const Tensor<double> P1 = m1.forward(d.q, d.q, d.q, masks).attn_weights;  // [B, 1, L, L]
    const Tensor<double> P8 = m8.forward(d.q, d.q, d.q, masks).attn_weights;  // [B, 8, L, L]
    double worst = 0.0, scale = 0.0;
    for (Index b = 0; b < one.B; ++b)
        for (Index i = 0; i < one.L; ++i)
            for (Index j = 1; j < one.L; ++j) {
                const double whole =
                    std::sqrt(32.0) * (std::log(P1(b, 0, i, j)) - std::log(P1(b, 0, i, 0)));
                double parts = 0.0;
                for (Index h = 0; h < 8; ++h)
                    parts += 2.0 * (std::log(P8(b, h, i, j)) - std::log(P8(b, h, i, 0)));
                worst = std::max(worst, std::abs(whole - parts));
                scale = std::max(scale, std::abs(whole));
            }
    CHECK(scale > 0.1);
    CHECK(worst <= 1e-10 * scale);
}

TEST_CASE("head i's scores are one E x E bilinear form of rank at most D", "[questions]") {
    // In the paper's convention W_i^Q, W_i^K in R^{E x D}:
    //   (Q W_i^Q)(K W_i^K)^T = Q (W_i^Q W_i^K^T) K^T,
    // so each head scores with the E x E matrix M_i = W_i^Q W_i^K^T, whose rank is <= D.
    MultiheadAttentionOptions o;
    o.embed_dim = 24;
    o.num_heads = 6;
    o.bias = false;
    const Index E = 24, D = 4;
    MultiheadAttention<double> m(o, 8);
    std::mt19937_64 rng(3);
    const Tensor<double> Xq = Tensor<double>::randn(Shape{5, E}, rng);  // [L, E] unbatched
    const Tensor<double> Xk = Tensor<double>::randn(Shape{7, E}, rng);  // [S, E]
    const Mat Q = Xq.matrix(), K = Xk.matrix();
    // The module's per-head weights: log P_i[r, j] - log P_i[r, 0] is the score difference
    // (s_i[r, j] - s_i[r, 0]), with s_i = Q M_i K^T / sqrt(D) if the claim holds.
    AttentionMasks<double> masks;
    masks.need_weights = true;
    masks.average_attn_weights = false;
    const Tensor<double> P = m.forward(Xq, Xk, Xk, masks).attn_weights;  // [H, L, S]
    for (Index i = 0; i < 6; ++i) {
        CAPTURE(i);
        const Mat WQ = as_matrix(m.head(i).q_weight()).transpose();                    // [E, D]
        const Mat WK = as_matrix(m.head(i).k_weight()).transpose();                    // [E, D]
        const Mat M = WQ * WK.transpose();                                             // [E, E]
        const Mat scores = Q * M * K.transpose() / std::sqrt(static_cast<double>(D));  // [L, S]
        double worst = 0.0, scale = 0.0;
        for (Index r = 0; r < 5; ++r)
            for (Index j = 1; j < 7; ++j) {
                const double library = std::log(P(i, r, j)) - std::log(P(i, r, 0));
                const double bilinear = scores(r, j) - scores(r, 0);
                worst = std::max(worst, std::abs(library - bilinear));
                scale = std::max(scale, std::abs(bilinear));
            }
        CHECK(scale > 0.1);
        CHECK(worst <= 1e-10 * scale);
        Eigen::FullPivLU<Mat> lu(M);
        lu.setThreshold(1e-10);
        CHECK(lu.rank() == D);  // generic weights: exactly D; never more
    }
}

TEST_CASE("every projection has the same parameters, and PyTorch's count", "[questions]") {
    for (const bool bias_kv : {false, true}) {
        MultiheadAttentionOptions o;
        o.embed_dim = 16;
        o.num_heads = 4;
        o.add_bias_kv = bias_kv;
        Index count = -1;
        for (Projection p : kProjections) {
            CAPTURE(bias_kv, to_string(p));
            o.projection = p;
            MultiheadAttention<double> m(o, 0);
            if (count < 0) count = m.parameter_count();
            CHECK(m.parameter_count() == count);
            Index from_dict = 0;
            for (const auto& [name, t] : m.state_dict()) from_dict += t.numel();
            CHECK(from_dict == count);
        }
        // sum(p.numel() for p in torch.nn.MultiheadAttention(16, 4, add_bias_kv=...).parameters())
        CHECK(count == 4 * 16 * 16 + 4 * 16 + (bias_kv ? 2 * 16 : 0));
    }
}

}  // namespace test_mha_questions
