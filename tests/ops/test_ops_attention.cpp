// SPDX-License-Identifier: MIT
// The attention kernel of one (batch, head) slice: reference loops, masks, strided blocks,
// fully masked rows, and gradcheck of dQ, dK, dV with dropout.
#include <headwise/gradcheck.hpp>
#include <headwise/ops/attention.hpp>

#include <cmath>   // std::exp, std::sqrt, std::isfinite
#include <limits>  // std::numeric_limits
#include <string>  // std::string
#include <tuple>   // std::get
#include <vector>  // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"

namespace test_ops_attention {

using namespace headwise;
using headwise::test::Tol;

namespace {

/// softmax(scale Q K^T + bias, masked = -inf) V in loops, double; zero rows where nothing shows.
/// Causal: query i may attend key j when j <= i + causal_offset.
Tensor<double> reference_slice(const Tensor<double>& Q, const Tensor<double>& K,
                               const Tensor<double>& V, double scale, const Tensor<bool>& mask,
                               const Tensor<double>& bias, const Tensor<bool>& padding, bool causal,
                               Index causal_offset, Tensor<double>* P_out) {
    const Index L = Q.size(0), S = K.size(0), D = Q.size(1), Dv = V.size(1);
    Tensor<double> O(Shape{L, Dv}), P(Shape{L, S});
    for (Index i = 0; i < L; ++i) {
        std::vector<double> s(static_cast<std::size_t>(S));
        std::vector<bool> hidden(static_cast<std::size_t>(S));
        double m = -std::numeric_limits<double>::infinity();
        for (Index j = 0; j < S; ++j) {
            double acc = 0;
            for (Index d = 0; d < D; ++d) acc += Q(i, d) * K(j, d);
            acc = acc * scale + (bias.empty() ? 0.0 : bias(i, j));
            const bool h = (!mask.empty() && mask(i, j)) || (!padding.empty() && padding(j)) ||
                           (causal && j > i + causal_offset);
            hidden[static_cast<std::size_t>(j)] = h;
            s[static_cast<std::size_t>(j)] = acc;
            if (!h && acc > m) m = acc;
        }
        double sum = 0;
        for (Index j = 0; j < S; ++j) {
            const auto u = static_cast<std::size_t>(j);
            s[u] = hidden[u] ? 0.0 : std::exp(s[u] - m);
            sum += s[u];
        }
        for (Index j = 0; j < S; ++j)
            P(i, j) = sum > 0 ? s[static_cast<std::size_t>(j)] / sum : 0.0;
        for (Index j = 0; j < S; ++j)
            for (Index e = 0; e < Dv; ++e) O(i, e) += P(i, j) * V(j, e);
    }
    if (P_out) *P_out = P;
    return O;
}

template <class T>
Tensor<T> cast(const Tensor<double>& x) {
    Tensor<T> y(x.shape());
    for (Index i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<T>(x.data()[i]);
    return y;
}

struct SliceCase {
    Index L, S, D, Dv;
    int masks;  // bit 0 bool mask, 1 bias, 2 key padding, 3 causal, 4 bottom-right alignment
};

/// The causal offset of a `masks` code (bit 4: bottom-right) for L queries over S keys.
Index offset_of(int masks, Index L, Index S) {
    return ops::causal_offset(
        (masks & 16) ? CausalAlignment::bottom_right : CausalAlignment::top_left, L, S);
}

}  // namespace

TEMPLATE_TEST_CASE("attention_forward matches the reference loops", "[ops][attention]", float,
                   double) {
    using T = TestType;
    auto [L, S, D, Dv, masks] =
        GENERATE(table<Index, Index, Index, Index, int>({{1, 1, 1, 1, 0},
                                                         {3, 5, 4, 4, 0},
                                                         {4, 4, 2, 3, 1},
                                                         {5, 3, 4, 4, 2},
                                                         {6, 6, 8, 8, 4},
                                                         {6, 6, 4, 2, 8},
                                                         {7, 5, 3, 3, 15},
                                                         {2, 9, 16, 16, 15},
                                                         {3, 7, 4, 4, 24},
                                                         {7, 3, 4, 4, 24},
                                                         {4, 9, 2, 5, 31}}));
    CAPTURE(L, S, D, Dv, masks);
    std::mt19937_64 rng(42);
    const auto Q = Tensor<double>::randn(Shape{L, D}, rng);
    const auto K = Tensor<double>::randn(Shape{S, D}, rng);
    const auto V = Tensor<double>::randn(Shape{S, Dv}, rng);
    Tensor<bool> mask, padding;
    Tensor<double> bias;
    if (masks & 1) {
        mask = Tensor<bool>(Shape{L, S});
        for (Index i = 0; i < L; ++i)
            for (Index j = 1; j < S; ++j) mask(i, j) = uniform01(rng) < 0.4;
    }
    if (masks & 2) bias = Tensor<double>::randn(Shape{L, S}, rng);
    if (masks & 4) {
        padding = Tensor<bool>(Shape{S});
        for (Index j = 1; j < S; ++j) padding(j) = uniform01(rng) < 0.4;
    }
    const bool causal = (masks & 8) != 0;
    const Index offset = offset_of(masks, L, S);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    Tensor<double> P_ref;
    const Tensor<double> O_ref =
        reference_slice(Q, K, V, scale, mask, bias, padding, causal, offset, &P_ref);

    // Q, K, V as strided column blocks of wider matrices, as MultiheadAttention passes them.
    Tensor<T> wide_q(Shape{L, D + 3}), wide_k(Shape{S, D + 2}), wide_v(Shape{S, Dv + 1});
    wide_q.column_block(1, D) = cast<T>(Q).matrix();
    wide_k.column_block(2, D) = cast<T>(K).matrix();
    wide_v.column_block(0, Dv) = cast<T>(V).matrix();
    const Tensor<T> bias_t = cast<T>(bias);
    ops::ScoreMask<T> sm;
    sm.mask = mask.empty() ? nullptr : mask.data();
    sm.mask_ld = S;
    sm.bias = bias.empty() ? nullptr : bias_t.data();
    sm.bias_ld = S;
    sm.key_padding = padding.empty() ? nullptr : padding.data();
    sm.causal = causal;
    sm.causal_offset = offset;
    Tensor<T> P(Shape{L, S}), O(Shape{L, Dv});
    ops::attention_forward<T>(wide_q.column_block(1, D), wide_k.column_block(2, D),
                              wide_v.column_block(0, Dv), sm, static_cast<T>(scale), ops::Dropout{},
                              0, P.matrix(), P.matrix(), O.matrix());
    HEADWISE_CHECK_CLOSE(O, O_ref, Tol<T>::rel);
    HEADWISE_CHECK_CLOSE(P, P_ref, Tol<T>::rel);
}

TEST_CASE("a row with every key masked attends to nothing: zero output, zero gradient",
          "[ops][attention]") {
    std::mt19937_64 rng(1);
    const Index L = 3, S = 4, D = 2;
    const auto Q = Tensor<double>::randn(Shape{L, D}, rng);
    const auto K = Tensor<double>::randn(Shape{S, D}, rng);
    const auto V = Tensor<double>::randn(Shape{S, D}, rng);
    Tensor<bool> mask(Shape{L, S});
    for (Index j = 0; j < S; ++j) mask(2, j) = true;
    ops::ScoreMask<double> sm;
    sm.mask = mask.data();
    sm.mask_ld = S;
    Tensor<double> P(Shape{L, S}), O(Shape{L, D});
    ops::attention_forward<double>(Q.matrix(), K.matrix(), V.matrix(), sm, 0.5, ops::Dropout{}, 0,
                                   P.matrix(), P.matrix(), O.matrix());
    for (Index j = 0; j < S; ++j) CHECK(P(2, j) == 0.0);
    for (Index e = 0; e < D; ++e) CHECK(O(2, e) == 0.0);
    Tensor<double> dQ(Shape{L, D}), dK(Shape{S, D}), dV(Shape{S, D}), scratch(Shape{L, S});
    const auto dO = Tensor<double>::randn(Shape{L, D}, rng);
    ops::attention_backward<double>(Q.matrix(), K.matrix(), V.matrix(), P.matrix(), 0.5,
                                    ops::Dropout{}, 0, dO.matrix(), scratch.matrix(), dQ.matrix(),
                                    dK.matrix(), dV.matrix());
    for (Index e = 0; e < D; ++e) CHECK(dQ(2, e) == 0.0);
    // Row 2 contributes nothing to dK and dV: they equal those of rows 0 and 1 alone, and a
    // different upstream gradient for row 2 changes nothing.
    const Index L2 = 2;
    Tensor<double> P2(Shape{L2, S}), O2(Shape{L2, D}), dQ2(Shape{L2, D}), dK2(Shape{S, D}),
        dV2(Shape{S, D}), scratch2(Shape{L2, S});
    ops::attention_forward<double>(Q.matrix().topRows(L2), K.matrix(), V.matrix(), sm, 0.5,
                                   ops::Dropout{}, 0, P2.matrix(), P2.matrix(), O2.matrix());
    ops::attention_backward<double>(Q.matrix().topRows(L2), K.matrix(), V.matrix(), P2.matrix(),
                                    0.5, ops::Dropout{}, 0, dO.matrix().topRows(L2),
                                    scratch2.matrix(), dQ2.matrix(), dK2.matrix(), dV2.matrix());
    HEADWISE_CHECK_CLOSE(dK, dK2, 1e-15);
    HEADWISE_CHECK_CLOSE(dV, dV2, 1e-15);
    Tensor<double> dO_other = dO, dK3(Shape{S, D}), dV3(Shape{S, D}), dQ3(Shape{L, D});
    for (Index e = 0; e < D; ++e) dO_other(2, e) = 100.0 + static_cast<double>(e);
    ops::attention_backward<double>(Q.matrix(), K.matrix(), V.matrix(), P.matrix(), 0.5,
                                    ops::Dropout{}, 0, dO_other.matrix(), scratch.matrix(),
                                    dQ3.matrix(), dK3.matrix(), dV3.matrix());
    HEADWISE_CHECK_CLOSE(dK3, dK, 0.0);
    HEADWISE_CHECK_CLOSE(dV3, dV, 0.0);
}

TEST_CASE("attention_backward matches finite differences, masks and dropout included",
          "[ops][attention][gradcheck]") {
    // Plain variables, not structured bindings: lambdas capture them (C++17).
    const auto row = GENERATE(table<Index, Index, Index, int, double>({{3, 4, 2, 0, 0.0},
                                                                       {4, 4, 3, 15, 0.0},
                                                                       {5, 3, 4, 3, 0.3},
                                                                       {2, 6, 2, 8, 0.5},
                                                                       {3, 6, 2, 24, 0.0},
                                                                       {2, 5, 3, 31, 0.3}}));
    const Index L = std::get<0>(row), S = std::get<1>(row), D = std::get<2>(row);
    const int masks = std::get<3>(row);
    const double p = std::get<4>(row);
    CAPTURE(L, S, D, masks, p);
    std::mt19937_64 rng(7);
    Tensor<bool> mask(Shape{L, S}), padding(Shape{S});
    for (Index i = 0; i < L; ++i)
        for (Index j = 1; j < S; ++j) mask(i, j) = (masks & 1) && uniform01(rng) < 0.4;
    for (Index j = 1; j < S; ++j) padding(j) = (masks & 4) && uniform01(rng) < 0.4;
    const Tensor<double> bias = Tensor<double>::randn(Shape{L, S}, rng);
    ops::ScoreMask<double> sm;
    sm.mask = mask.data();
    sm.mask_ld = S;
    sm.bias = (masks & 2) ? bias.data() : nullptr;
    sm.bias_ld = S;
    sm.key_padding = padding.data();
    sm.causal = (masks & 8) != 0;
    sm.causal_offset = offset_of(masks, L, S);
    const ops::Dropout dropout{p, 1234};
    const double scale = 0.7;
    const auto f = [=](const std::vector<Tensor<double>>& x) {
        Tensor<double> P(Shape{L, S}), A(Shape{L, S}), O(Shape{L, D});
        ops::attention_forward<double>(x[0].matrix(), x[1].matrix(), x[2].matrix(), sm, scale,
                                       dropout, 3, P.matrix(), A.matrix(), O.matrix());
        return O;
    };
    const auto back = [=](const std::vector<Tensor<double>>& x, const Tensor<double>& dO) {
        Tensor<double> P(Shape{L, S}), A(Shape{L, S}), O(Shape{L, D});
        ops::attention_forward<double>(x[0].matrix(), x[1].matrix(), x[2].matrix(), sm, scale,
                                       dropout, 3, P.matrix(), A.matrix(), O.matrix());
        Tensor<double> dQ(Shape{L, D}), dK(Shape{S, D}), dV(Shape{S, D}), scratch(Shape{L, S});
        ops::attention_backward<double>(x[0].matrix(), x[1].matrix(), x[2].matrix(), P.matrix(),
                                        scale, dropout, 3, dO.matrix(), scratch.matrix(),
                                        dQ.matrix(), dK.matrix(), dV.matrix());
        return std::vector<Tensor<double>>{dQ, dK, dV};
    };
    const std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{L, D}, rng),
                                             Tensor<double>::randn(Shape{S, D}, rng),
                                             Tensor<double>::randn(Shape{S, D}, rng)};
    const GradcheckResult r = gradcheck(f, back, inputs, rng);
    INFO(r.where);
    CHECK(r.checked == (L + 2 * S) * D);
    CHECK(r.max_rel_error <= 1e-6);
}

TEST_CASE("attention gradients accumulate into dQ, dK, dV", "[ops][attention]") {
    std::mt19937_64 rng(3);
    const Index L = 3, S = 3, D = 2;
    const auto Q = Tensor<double>::randn(Shape{L, D}, rng);
    const auto K = Tensor<double>::randn(Shape{S, D}, rng);
    const auto V = Tensor<double>::randn(Shape{S, D}, rng);
    const auto dO = Tensor<double>::randn(Shape{L, D}, rng);
    Tensor<double> P(Shape{L, S}), O(Shape{L, D}), scratch(Shape{L, S});
    ops::attention_forward<double>(Q.matrix(), K.matrix(), V.matrix(), {}, 1.0, {}, 0, P.matrix(),
                                   P.matrix(), O.matrix());
    Tensor<double> dQ1(Shape{L, D}), dK1(Shape{S, D}), dV1(Shape{S, D});
    auto run = [&](Tensor<double>& dQ, Tensor<double>& dK, Tensor<double>& dV) {
        ops::attention_backward<double>(Q.matrix(), K.matrix(), V.matrix(), P.matrix(), 1.0, {}, 0,
                                        dO.matrix(), scratch.matrix(), dQ.matrix(), dK.matrix(),
                                        dV.matrix());
    };
    run(dQ1, dK1, dV1);
    Tensor<double> dQ2 = dQ1, dK2 = dK1, dV2 = dV1;
    run(dQ2, dK2, dV2);
    // Twice the gradient, to rounding: a BLAS adds into C inside its accumulation (beta = 1), so
    // the second call need not round as 2 x the first; a kernel that overwrote would be 50% off.
    Tensor<double> twice_dQ = dQ1, twice_dK = dK1, twice_dV = dV1;
    for (double& v : twice_dQ) v *= 2;
    for (double& v : twice_dK) v *= 2;
    for (double& v : twice_dV) v *= 2;
    HEADWISE_CHECK_CLOSE(dQ2, twice_dQ, Tol<double>::rel);
    HEADWISE_CHECK_CLOSE(dK2, twice_dK, Tol<double>::rel);
    HEADWISE_CHECK_CLOSE(dV2, twice_dV, Tol<double>::rel);
}

TEMPLATE_TEST_CASE(
    "bottom-right causal attention of the last L queries equals the last rows of "
    "a full causal attention",
    "[ops][attention]", float, double) {
    using T = TestType;
    const auto [L, S] = GENERATE(table<Index, Index>({{1, 1}, {1, 6}, {3, 6}, {6, 6}}));
    CAPTURE(L, S);
    const Index D = 4;
    std::mt19937_64 rng(11);
    const auto Q = Tensor<T>::randn(Shape{S, D}, rng);  // one query per key: the full sequence
    const auto K = Tensor<T>::randn(Shape{S, D}, rng);
    const auto V = Tensor<T>::randn(Shape{S, D}, rng);
    const T scale = T(0.6);

    ops::ScoreMask<T> full;  // top-left over the whole sequence
    full.causal = true;
    Tensor<T> P_full(Shape{S, S}), O_full(Shape{S, D});
    ops::attention_forward<T>(Q.matrix(), K.matrix(), V.matrix(), full, scale, ops::Dropout{}, 0,
                              P_full.matrix(), P_full.matrix(), O_full.matrix());

    ops::ScoreMask<T> last;  // the last L queries, aligned bottom-right
    last.causal = true;
    last.causal_offset = ops::causal_offset(CausalAlignment::bottom_right, L, S);
    Tensor<T> P(Shape{L, S}), O(Shape{L, D});
    ops::attention_forward<T>(Q.matrix().bottomRows(L), K.matrix(), V.matrix(), last, scale,
                              ops::Dropout{}, 0, P.matrix(), P.matrix(), O.matrix());
    const Tensor<T> O_rows(Shape{L, D},
                           std::vector<T>(O_full.data() + (S - L) * D, O_full.data() + S * D));
    const Tensor<T> P_rows(Shape{L, S},
                           std::vector<T>(P_full.data() + (S - L) * S, P_full.data() + S * S));
    // The same arithmetic on the same rows. Eigen's products give them to the last bit; a BLAS
    // (HEADWISE_BLAS) may pick other kernels for a product of fewer rows, so the rows agree to
    // rounding there. A wrong causal offset hides other keys and changes them far more.
    HEADWISE_CHECK_CLOSE(O, O_rows, Tol<T>::rel);
    HEADWISE_CHECK_CLOSE(P, P_rows, Tol<T>::rel);
#if !(defined(HEADWISE_USE_CBLAS) && HEADWISE_USE_CBLAS)
    CHECK(test::identical(O, O_rows));
    CHECK(test::identical(P, P_rows));
#endif
}

TEST_CASE("the attention kernels check every shape in every build, before writing",
          "[ops][attention]") {
    const Index L = 3, S = 4, D = 2, Dv = 5;
    std::mt19937_64 rng(5);
    const auto Q = Tensor<double>::randn(Shape{L, D}, rng);
    const auto K = Tensor<double>::randn(Shape{S, D}, rng);
    const auto V = Tensor<double>::randn(Shape{S, Dv}, rng);
    const auto dO = Tensor<double>::randn(Shape{L, Dv}, rng);
    const auto K_wide = Tensor<double>::randn(Shape{S, D + 1}, rng);
    const auto V_short = Tensor<double>::randn(Shape{S - 1, Dv}, rng);
    Tensor<double> P(Shape{L, S}), O(Shape{L, Dv}), scratch(Shape{L, S});
    Tensor<double> P_bad(Shape{L, S + 1}), O_bad(Shape{L, Dv + 1});
    Tensor<double> dQ(Shape{L, D}), dK(Shape{S, D}), dV(Shape{S, Dv}), dK_bad(Shape{S + 1, D});
    const ops::ScoreMask<double> none;
    const ops::Dropout off;
    const auto forward = [&](const Tensor<double>& k, const Tensor<double>& v, Tensor<double>& p,
                             Tensor<double>& o, const ops::ScoreMask<double>& mask) {
        ops::attention_forward<double>(Q.matrix(), k.matrix(), v.matrix(), mask, 1.0, off, 0,
                                       p.matrix(), p.matrix(), o.matrix());
    };
    const std::string fwd = "headwise::ops::attention_forward: ";
    CHECK_THROWS_MATCHES(forward(K_wide, V, P, O, none), shape_error,
                         Message(fwd + "K: expected shape [4, 2], got [4, 3]"));
    CHECK_THROWS_MATCHES(forward(K, V_short, P, O, none), shape_error,
                         Message(fwd + "V: expected shape [4, 5], got [3, 5]"));
    CHECK_THROWS_MATCHES(forward(K, V, P_bad, O, none), shape_error,
                         Message(fwd + "P: expected shape [3, 4], got [3, 5]"));
    CHECK_THROWS_MATCHES(forward(K, V, P, O_bad, none), shape_error,
                         Message(fwd + "O: expected shape [3, 5], got [3, 6]"));
    // A mask whose rows are shorter than the keys it is said to cover.
    const Tensor<bool> narrow(Shape{L, S - 1});
    ops::ScoreMask<double> short_rows;
    short_rows.mask = narrow.data();
    short_rows.mask_ld = S - 1;
    CHECK_THROWS_MATCHES(
        forward(K, V, P, O, short_rows), std::invalid_argument,
        Message(fwd + "mask.mask_ld: must be at least the masked key count 4, got 3"));
    ops::ScoreMask<double> too_many;
    too_many.masked_keys = S + 1;
    CHECK_THROWS_MATCHES(forward(K, V, P, O, too_many), std::invalid_argument,
                         Message(fwd + "mask.masked_keys: must be at most the key count 4, got 5"));
    // Nothing was written by the calls that threw.
    CHECK(test::identical(O, Tensor<double>(Shape{L, Dv})));
    CHECK(test::identical(P, Tensor<double>(Shape{L, S})));

    forward(K, V, P, O, none);
    const auto backward = [&](Tensor<double>& dk) {
        ops::attention_backward<double>(Q.matrix(), K.matrix(), V.matrix(), P.matrix(), 1.0, off, 0,
                                        dO.matrix(), scratch.matrix(), dQ.matrix(), dk.matrix(),
                                        dV.matrix());
    };
    CHECK_THROWS_MATCHES(
        backward(dK_bad), shape_error,
        Message("headwise::ops::attention_backward: dK: expected shape [4, 2], got [5, 2]"));
    CHECK(test::identical(dQ, Tensor<double>(Shape{L, D})));
    CHECK(test::identical(dV, Tensor<double>(Shape{S, Dv})));
    CHECK_NOTHROW(backward(dK));
}

}  // namespace test_ops_attention
