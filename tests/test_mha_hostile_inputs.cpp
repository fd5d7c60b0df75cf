// SPDX-License-Identifier: MIT
// MultiheadAttention under hostile inputs: NaN in, NaN out; sizes that would overflow; empty masks
// of the wrong shape; Projection values that are no enumerator; a backward with a foreign forward.
#include <headwise/headwise.hpp>

#include <cmath>      // std::isnan, std::isfinite
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::MhaConfig;

namespace {

constexpr Projection kProjections[] = {Projection::fused, Projection::separate,
                                       Projection::per_head};

/// How many entries of output row (b, i) of a [B, L, E] tensor are NaN, and how many finite.
struct RowCount {
    Index nan = 0, finite = 0;
};
template <class T>
RowCount count_row(const Tensor<T>& y, Index b, Index i) {
    RowCount r;
    for (Index e = 0; e < y.size(2); ++e) {
        if (std::isnan(y(b, i, e))) ++r.nan;
        if (std::isfinite(y(b, i, e))) ++r.finite;
    }
    return r;
}

template <class T>
bool all_finite(const Tensor<T>& t) {
    for (T x : t)
        if (!std::isfinite(x)) return false;
    return true;
}

/// Every row of `y` [B, L, E] is either all NaN (when `poisoned(b, i)`) or all finite.
template <class T, class Poisoned>
void check_rows(const Tensor<T>& y, Poisoned poisoned) {
    for (Index b = 0; b < y.size(0); ++b)
        for (Index i = 0; i < y.size(1); ++i) {
            CAPTURE(b, i);
            const RowCount r = count_row(y, b, i);
            if (poisoned(b, i)) {
                CHECK(r.nan == y.size(2));
            } else {
                CHECK(r.finite == y.size(2));
            }
        }
}

/// Random parameters, biases included, so that no row is finite merely because a bias is zero.
template <class T>
void randomize(MultiheadAttention<T>& m, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto sd = m.state_dict();
    for (auto& [name, t] : sd) t = Tensor<T>::randn(t.shape(), rng);
    m.load_state_dict(sd);
}

}  // namespace

TEMPLATE_TEST_CASE("NaN in a query, a key, a value or attn_bias gives NaN in the rows it reaches",
                   "[mha][nan]", float, double) {
    using T = TestType;
    const T nan = std::numeric_limits<T>::quiet_NaN();
    MhaConfig c;
    c.inputs = Inputs::distinct;
    c.S = 4;
    c.L = 3;
    for (Projection p : kProjections) {
        CAPTURE(to_string(p));
        MultiheadAttention<T> m(c.options(p), 5);
        randomize(m, 6);
        const test::MhaData<T> clean = test::make_data<T>(c);
        SECTION("a NaN query poisons its own row") {
            test::MhaData<T> d = clean;
            d.q(0, 1, 3) = nan;
            const auto f = m.forward(d.q, d.k, d.v, d.masks);
            check_rows(f.output, [](Index b, Index i) { return b == 0 && i == 1; });
        }
        SECTION("a NaN key poisons every row of its batch entry, masked or not") {
            for (bool padded : {false, true}) {
                CAPTURE(padded);
                test::MhaData<T> d = clean;
                d.k(1, 2, 0) = nan;
                if (padded) {  // as in PyTorch, which adds -inf to a NaN score: still NaN
                    d.masks.key_padding_mask = Tensor<bool>(Shape{c.B, c.S});
                    d.masks.key_padding_mask(1, 2) = true;
                }
                const auto f = m.forward(d.q, d.k, d.v, d.masks);
                check_rows(f.output, [](Index b, Index) { return b == 1; });
            }
        }
        SECTION("a NaN value poisons every row of its batch entry") {
            test::MhaData<T> d = clean;
            d.v(0, 3, 1) = nan;
            const auto f = m.forward(d.q, d.k, d.v, d.masks);
            check_rows(f.output, [](Index b, Index) { return b == 0; });
        }
        SECTION("a NaN in attn_bias poisons its query row, under a boolean mask too") {
            for (bool masked : {false, true}) {
                CAPTURE(masked);
                test::MhaData<T> d = clean;
                d.masks.attn_bias = Tensor<T>(Shape{c.L, c.S});
                d.masks.attn_bias(2, 1) = nan;
                if (masked) {
                    d.masks.attn_mask = Tensor<bool>(Shape{c.L, c.S});
                    d.masks.attn_mask(2, 1) = true;
                }
                d.masks.need_weights = true;
                const auto f = m.forward(d.q, d.k, d.v, d.masks);
                check_rows(f.output, [](Index, Index i) { return i == 2; });
                for (Index b = 0; b < c.B; ++b)
                    for (Index j = 0; j < c.S; ++j) CHECK(std::isnan(f.attn_weights(b, 2, j)));
            }
        }
        SECTION("a finite output has finite gradients, with a masked NaN-free row too") {
            // Every key of query row 1 hidden (a fully masked row stays exactly zero), the
            // other rows see some keys: forward finite, so every gradient must be finite.
            test::MhaData<T> d = clean;
            d.masks.attn_mask = Tensor<bool>(Shape{c.L, c.S});
            for (Index j = 0; j < c.S; ++j) d.masks.attn_mask(1, j) = true;
            d.masks.attn_mask(0, 3) = true;
            const auto f = m.forward(d.q, d.k, d.v, d.masks);
            REQUIRE(all_finite(f.output));
            std::mt19937_64 rng(3);
            const auto g = m.backward(f, Tensor<T>::randn(f.output.shape(), rng));
            CHECK(all_finite(g.query));
            CHECK(all_finite(g.key));
            CHECK(all_finite(g.value));
            for (const auto& [name, grad] : m.grad_dict()) {
                CAPTURE(name);
                CHECK(all_finite(grad));
            }
            for (Index b = 0; b < c.B; ++b)
                for (Index e = 0; e < c.E; ++e) CHECK(g.query(b, 1, e) == T(0));
        }
    }
}

TEMPLATE_TEST_CASE("NaN in, NaN out survives dropout", "[mha][nan][dropout]", float, double) {
    // A NaN key makes every weight of its batch entry NaN; a dropped NaN weight must stay NaN
    // (NaN * 0), or a row whose weights are all dropped would come out finite.
    using T = TestType;
    MhaConfig c;
    c.inputs = Inputs::distinct;
    c.dropout = 0.9;
    c.L = 6;
    c.S = 3;
    test::MhaData<T> d = test::make_data<T>(c);
    d.k(1, 2, 0) = std::numeric_limits<T>::quiet_NaN();
    for (Projection p : kProjections) {
        CAPTURE(to_string(p));
        MultiheadAttention<T> m(c.options(p), 2);
        const auto f = m.forward(d.q, d.k, d.v, d.masks);
        check_rows(f.output, [](Index b, Index) { return b == 1; });
    }
}

TEST_CASE("MultiheadAttention refuses parameter sizes that overflow", "[mha][errors]") {
    const std::string fn = "headwise::MultiheadAttention::MultiheadAttention: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    o.kdim = Index(1) << 61;
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options: embed_dim = 8, kdim = 2305843009213693952, vdim = 8: the "
                             "in-projection weights [embed_dim, embed_dim + kdim + vdim] overflow "
                             "the address space");
    o.kdim = 0;
    o.embed_dim = Index(1) << 32;
    o.num_heads = 1;
    REQUIRE_THROWS_WITH(MultiheadAttention<double>(o),
                        fn + "options: embed_dim = 4294967296, kdim = 4294967296, vdim = "
                             "4294967296: the in-projection weights [embed_dim, embed_dim + kdim "
                             "+ vdim] overflow the address space");
    o.embed_dim = 8;
    o.vdim = std::numeric_limits<Index>::max();
    REQUIRE_THROWS_AS(MultiheadAttention<double>(o), std::invalid_argument);
}

TEST_CASE("only an absent mask means no mask: an empty mask of the wrong shape is an error",
          "[mha][errors][mask]") {
    const std::string fn = "headwise::MultiheadAttention::forward: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    MultiheadAttention<double> m(o, 3);
    const Tensor<double> q(Shape{2, 3, 8}), k(Shape{2, 4, 8});
    auto fails = [&](const AttentionMasks<double>& masks, const std::string& message) {
        CAPTURE(message);
        REQUIRE_THROWS_AS(m.forward(q, k, k, masks), shape_error);
        REQUIRE_THROWS_WITH(m.forward(q, k, k, masks), fn + message);
    };
    AttentionMasks<double> bad;
    bad.key_padding_mask = Tensor<bool>(Shape{0, 4});
    fails(bad, "masks.key_padding_mask: expected shape [2, 4], got [0, 4]");
    bad = {};
    bad.attn_bias = Tensor<double>(Shape{2, 0, 3, 4});
    fails(bad, "masks.attn_bias: expected shape [3, 4] or [2, 2, 3, 4], got [2, 0, 3, 4]");
    bad = {};
    bad.attn_mask = Tensor<bool>(Shape{0, 0});
    fails(bad, "masks.attn_mask: expected shape [3, 4] or [2, 2, 3, 4], got [0, 0]");
    bad = {};
    bad.attn_mask = Tensor<bool>(Shape{});  // rank 0: one element, not absent
    fails(bad, "masks.attn_mask: expected shape [3, 4] or [2, 2, 3, 4], got []");
    // Default-constructed masks are absent.
    const AttentionMasks<double> none;
    CHECK(m.forward(q, k, k, none).output.shape() == q.shape());
}

TEST_CASE("a Projection value that is no enumerator throws std::invalid_argument",
          "[mha][errors]") {
    const auto bogus = static_cast<Projection>(42);
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    o.projection = bogus;
    REQUIRE_THROWS_AS(MultiheadAttention<double>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<double>(o),
                        "headwise::MultiheadAttention::MultiheadAttention: options.projection: "
                        "must be fused, separate or per_head, got Projection(42)");
    o.projection = Projection::separate;
    MultiheadAttention<double> m(o, 1);
    STATIC_REQUIRE_FALSE(noexcept(m.with_projection(Projection::fused)));
    REQUIRE_THROWS_AS(m.with_projection(bogus), std::invalid_argument);
    REQUIRE_THROWS_WITH(m.with_projection(bogus),
                        "headwise::MultiheadAttention::with_projection: projection: must be "
                        "fused, separate or per_head, got Projection(42)");
    CHECK(m.projection() == Projection::separate);  // unchanged
}

TEST_CASE("backward with another module's forward names the option, expected and actual",
          "[mha][errors]") {
    const std::string fn = "headwise::MultiheadAttention::backward: ";
    MhaConfig c;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> a(c.options(Projection::fused), 1);
    const auto f = a.forward(d.q, d.q, d.q);
    const Tensor<double> dy(f.output.shape());

    MhaConfig heads = c;
    heads.H = 4;
    MultiheadAttention<double> b(heads.options(Projection::fused), 1);
    REQUIRE_THROWS_AS(b.backward(f, dy), std::invalid_argument);
    REQUIRE_THROWS_WITH(b.backward(f, dy),
                        fn + "fwd: comes from a module with other options (num_heads: "
                             "expected 4, got 2)");

    MhaConfig several = c;
    several.bias = false;
    several.bias_kv = true;
    MultiheadAttention<double> e(several.options(Projection::per_head), 1);
    REQUIRE_THROWS_WITH(e.backward(f, dy),
                        fn + "fwd: comes from a module with other options (bias: expected 0, "
                             "got 1; add_bias_kv: expected 1, got 0)");
    for (const auto& [name, g] : e.grad_dict())
        for (double x : g) CHECK(x == 0.0);
}
