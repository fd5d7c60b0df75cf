// SPDX-License-Identifier: MIT
// MultiheadAttention's chosen scale and bottom-right causal alignment: a scale equals the default
// one with the query projection rescaled, and the last rows of a causal self-attention equal a
// bottom-right aligned chunk of those queries over the whole sequence.
#include <headwise/headwise.hpp>

#include <cmath>      // std::sqrt
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"

namespace test_mha_scale_causal {

using namespace headwise;
using headwise::test::Tol;

namespace {

using headwise::test::kProjections;

/// Rows [first, first + count) of a [B, N, F] tensor, as a new [B, count, F] tensor.
template <class T>
Tensor<T> rows(const Tensor<T>& x, Index first, Index count) {
    const Index B = x.size(0), F = x.size(2);
    Tensor<T> out(Shape{B, count, F});
    for (Index b = 0; b < B; ++b)
        for (Index n = 0; n < count; ++n)
            for (Index f = 0; f < F; ++f) out(b, n, f) = x(b, first + n, f);
    return out;
}

}  // namespace

TEST_CASE("a chosen scale equals the default scale with the query projection rescaled",
          "[mha][scale]") {
    // scale * (X Wq^T + bq) K^T = (1 / sqrt(D)) (X (c Wq)^T + c bq) K^T with c = scale sqrt(D):
    // the same outputs and input gradients; the query rows' parameter gradients differ by c.
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(to_string(p));
    const Index B = 2, L = 3, S = 4, E = 8, H = 2, D = E / H;
    const double scale = 0.37, c = scale * std::sqrt(static_cast<double>(D));
    MultiheadAttentionOptions o;
    o.embed_dim = E;
    o.num_heads = H;
    o.projection = p;
    o.add_bias_kv = true;
    MultiheadAttention<double> rescaled(o, 3);
    o.scale = scale;
    MultiheadAttention<double> scaled(o, 3);
    std::mt19937_64 rng(8);
    auto sd = scaled.state_dict();
    sd["in_proj_bias"] = Tensor<double>::randn(Shape{3 * E}, rng);
    scaled.load_state_dict(sd);
    for (Index r = 0; r < E; ++r) {  // the query rows of in_proj_weight and in_proj_bias
        for (Index k = 0; k < E; ++k) sd["in_proj_weight"](r, k) *= c;
        sd["in_proj_bias"](r) *= c;
    }
    rescaled.load_state_dict(sd);

    const auto q = Tensor<double>::randn(Shape{B, L, E}, rng);
    const auto kv = Tensor<double>::randn(Shape{B, S, E}, rng);
    const auto dy = Tensor<double>::randn(Shape{B, L, E}, rng);
    AttentionMasks<double> m;
    m.need_weights = true;
    const auto f1 = scaled.forward(q, kv, kv, m);
    const auto f2 = rescaled.forward(q, kv, kv, m);
    HEADWISE_CHECK_CLOSE(f1.output, f2.output, 1e-12);
    HEADWISE_CHECK_CLOSE(f1.attn_weights, f2.attn_weights, 1e-12);
    const auto g1 = scaled.backward(f1, dy);
    const auto g2 = rescaled.backward(f2, dy);
    HEADWISE_CHECK_CLOSE(g1.query, g2.query, 1e-12);
    HEADWISE_CHECK_CLOSE(g1.key, g2.key, 1e-12);
    auto grads2 = rescaled.grad_dict();
    for (Index r = 0; r < E; ++r) {  // d/dWq = c d/d(c Wq)
        for (Index k = 0; k < E; ++k) grads2["in_proj_weight"](r, k) *= c;
        grads2["in_proj_bias"](r) *= c;
    }
    const auto grads1 = scaled.grad_dict();
    for (const auto& [name, g] : grads1) {
        CAPTURE(name);
        HEADWISE_CHECK_CLOSE(g, grads2.at(name), 1e-12);
    }
}

TEST_CASE("scale must be finite", "[mha][scale][errors]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    o.scale = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH(MultiheadAttention<float>(o),
                      "headwise::MultiheadAttention::MultiheadAttention: options.scale: must be "
                      "finite in float (at most 3.4028235e+38 in magnitude), or unset for "
                      "1 / sqrt(D), got inf");
    o.scale = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    o.scale = 0.0;  // legal: uniform attention over the visible keys
    CHECK_NOTHROW(MultiheadAttention<float>(o));
}

TEMPLATE_TEST_CASE(
    "bottom-right causal attention of the last queries equals the last rows of a "
    "causal self-attention",
    "[mha][causal]", float, double) {
    using T = TestType;
    const Index B = 2, N = 6, E = 8, H = 2;
    const Index L = GENERATE(Index(1), Index(2), Index(6));
    const bool appended = GENERATE(false, true);  // bias_k and a zero-attention key
    std::mt19937_64 rng(21);
    const auto x = Tensor<T>::randn(Shape{B, N, E}, rng);
    for (Projection p : kProjections) {
        CAPTURE(L, appended, to_string(p));
        MultiheadAttentionOptions o;
        o.embed_dim = E;
        o.num_heads = H;
        o.projection = p;
        o.add_bias_kv = appended;
        o.add_zero_attn = appended;
        MultiheadAttention<T> m(o, 5);
        m.eval();
        AttentionMasks<T> full;
        full.is_causal = true;
        full.need_weights = true;
        full.average_attn_weights = false;
        const auto whole = m.forward(x, x, x, full);  // top-left, the whole sequence

        AttentionMasks<T> chunk = full;
        chunk.causal_alignment = CausalAlignment::bottom_right;
        const Tensor<T> q = rows(x, N - L, L);
        const auto last = m.forward(q, x, x, chunk);
        HEADWISE_CHECK_CLOSE(last.output, rows(whole.output, N - L, L), Tol<T>::rel);
        // Weights [B, H, L, S']: the last L query rows of every head.
        const Index Sx = whole.attn_weights.size(3);
        Tensor<T> expected(Shape{B, H, L, Sx});
        for (Index b = 0; b < B; ++b)
            for (Index h = 0; h < H; ++h)
                for (Index i = 0; i < L; ++i)
                    for (Index j = 0; j < Sx; ++j)
                        expected(b, h, i, j) = whole.attn_weights(b, h, N - L + i, j);
        HEADWISE_CHECK_CLOSE(last.attn_weights, expected, Tol<T>::rel);
    }
}

TEST_CASE("top-left and bottom-right agree when L == S, and differ when L < S", "[mha][causal]") {
    const Index B = 1, L = 3, E = 4, H = 1;
    std::mt19937_64 rng(2);
    const auto q = Tensor<double>::randn(Shape{B, L, E}, rng);
    const auto kv = Tensor<double>::randn(Shape{B, 5, E}, rng);
    MultiheadAttentionOptions o;
    o.embed_dim = E;
    o.num_heads = H;
    MultiheadAttention<double> m(o, 1);
    AttentionMasks<double> tl, br;
    tl.is_causal = br.is_causal = true;
    tl.need_weights = br.need_weights = true;
    br.causal_alignment = CausalAlignment::bottom_right;
    CHECK(test::identical(m.forward(q, q, q, tl).output, m.forward(q, q, q, br).output));
    const auto a = m.forward(q, kv, kv, tl), b = m.forward(q, kv, kv, br);
    // Top-left: query 0 sees key 0 only; bottom-right: query 0 sees keys 0..2 of 5.
    CHECK(a.attn_weights(0, 0, 1) == 0.0);
    CHECK(b.attn_weights(0, 0, 1) > 0.0);
    CHECK(b.attn_weights(0, 0, 3) == 0.0);
    CHECK(b.attn_weights(0, 2, 4) > 0.0);
}

}  // namespace test_mha_scale_causal
