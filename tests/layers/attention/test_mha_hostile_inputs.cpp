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
#include "support/projections.hpp"

namespace test_mha_hostile_inputs {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::MhaConfig;

namespace {

using headwise::test::kProjections;

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

TEST_CASE("backward refuses the forward of a module with other key/value heads or another scale",
          "[mha][errors][gqa]") {
    // A forward keeps buffers sized for its module's key/value heads: a backward that walked them
    // with another count of heads would read and write past them.
    const std::string fn = "headwise::MultiheadAttention::backward: ";
    MhaConfig c;
    c.H = 4;
    c.Hkv = 2;  // E = 8, D = 2
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> grouped(c.options(Projection::fused), 1);
    const auto f = grouped.forward(d.q, d.q, d.q);
    const Tensor<double> dy(f.output.shape());

    MhaConfig full = c;
    full.Hkv = 4;
    MultiheadAttention<double> m(full.options(Projection::fused), 1);
    REQUIRE_THROWS_AS(m.backward(f, dy), std::invalid_argument);
    REQUIRE_THROWS_WITH(m.backward(f, dy),
                        fn + "fwd: comes from a module with other options (num_kv_heads: "
                             "expected 4, got 2)");
    for (const auto& [name, g] : m.grad_dict())
        for (double x : g) CHECK(x == 0.0);
    // The other way round: fewer key/value heads than the forward's.
    const auto f_full = m.forward(d.q, d.q, d.q);
    REQUIRE_THROWS_WITH(grouped.backward(f_full, dy),
                        fn + "fwd: comes from a module with other options (num_kv_heads: "
                             "expected 2, got 4)");
    // 0 means num_heads: the same module as num_kv_heads = num_heads.
    full.Hkv = 0;
    MultiheadAttention<double> zero(full.options(Projection::fused), 1);
    CHECK_NOTHROW(zero.backward(f_full, dy));

    MhaConfig scaled = c;
    scaled.scale = 0.5;
    MultiheadAttention<double> s(scaled.options(Projection::fused), 1);
    REQUIRE_THROWS_AS(s.backward(f, dy), std::invalid_argument);
    REQUIRE_THROWS_WITH(s.backward(f, dy),
                        fn + "fwd: comes from a module with other options (scale: expected 0.5, "
                             "got 0.7071067811865475)");
    // An explicit 1 / sqrt(D) is the unset scale.
    scaled.scale = 1.0 / std::sqrt(2.0);
    MultiheadAttention<double> same(scaled.options(Projection::fused), 1);
    CHECK_NOTHROW(same.backward(f, dy));
}

TEST_CASE("every option is compared by backward or leaves backward's result as it is",
          "[mha][errors]") {
    // One line per field of MultiheadAttentionOptions: this binding stops compiling when a field
    // is added, so that the list below gets a line for it.
    [[maybe_unused]] const auto& [embed_dim, num_heads, projection, bias, kdim, vdim, add_bias_kv,
                                  add_zero_attn, dropout, reference_inputs, num_kv_heads, scale,
                                  attention_kernel, attention_tiles, rotary, head_dim] =
        MultiheadAttentionOptions{};
    const std::string fn = "headwise::MultiheadAttention::backward: ";
    MhaConfig c;
    c.E = 8;
    c.H = 4;
    c.Hkv = 2;
    c.inputs = Inputs::distinct;
    c.S = 4;
    const MultiheadAttentionOptions base = c.options(Projection::fused);
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> a(base, 1);
    const auto f = a.forward(d.q, d.k, d.v);
    std::mt19937_64 rng(4);
    const Tensor<double> dy = Tensor<double>::randn(f.output.shape(), rng);
    const auto expected = a.backward(f, dy);

    using Edit = void (*)(MultiheadAttentionOptions&);
    struct Case {
        const char* field;
        Edit edit;
        const char* message;  // nullptr: backward runs and gives the same result
    };
    const Case cases[] = {
        {"embed_dim", [](MultiheadAttentionOptions& o) { o.embed_dim = 12; },
         "embed_dim: expected 12, got 8"},
        {"num_heads", [](MultiheadAttentionOptions& o) { o.num_heads = 2; },
         "num_heads: expected 2, got 4"},
        {"projection", [](MultiheadAttentionOptions& o) { o.projection = Projection::per_head; },
         nullptr},
        {"bias", [](MultiheadAttentionOptions& o) { o.bias = false; }, "bias: expected 0, got 1"},
        {"kdim", [](MultiheadAttentionOptions& o) { o.kdim = 5; }, "kdim: expected 5, got 8"},
        {"vdim", [](MultiheadAttentionOptions& o) { o.vdim = 3; }, "vdim: expected 3, got 8"},
        {"add_bias_kv", [](MultiheadAttentionOptions& o) { o.add_bias_kv = true; },
         "add_bias_kv: expected 1, got 0"},
        {"add_zero_attn", [](MultiheadAttentionOptions& o) { o.add_zero_attn = true; },
         "add_zero_attn: expected 1, got 0"},
        {"dropout", [](MultiheadAttentionOptions& o) { o.dropout = 0.25; },
         "dropout: expected 0.25, got 0"},
        {"reference_inputs", [](MultiheadAttentionOptions& o) { o.reference_inputs = true; },
         nullptr},
        {"num_kv_heads", [](MultiheadAttentionOptions& o) { o.num_kv_heads = 4; },
         "num_kv_heads: expected 4, got 2"},
        {"scale", [](MultiheadAttentionOptions& o) { o.scale = 0.25; },
         "scale: expected 0.25, got 0.7071067811865475"},
        {"attention_kernel",
         [](MultiheadAttentionOptions& o) { o.attention_kernel = AttentionKernel::blocked; },
         nullptr},
        {"attention_tiles",
         [](MultiheadAttentionOptions& o) {
             o.attention_tiles = {2, 3};
         },
         nullptr},
        {"rotary", [](MultiheadAttentionOptions& o) { o.rotary.enabled = true; },
         "rotary.enabled: expected 1, got 0"},
        {"head_dim", [](MultiheadAttentionOptions& o) { o.head_dim = 3; },
         "head_dim: expected 3, got 2"},
        // An explicit head_dim equal to embed_dim / num_heads is the default.
        {"head_dim", [](MultiheadAttentionOptions& o) { o.head_dim = 2; }, nullptr},
    };
    for (const Case& k : cases) {
        CAPTURE(k.field);
        MultiheadAttentionOptions o = base;
        k.edit(o);
        MultiheadAttention<double> m(o, 1);
        if (k.message) {
            REQUIRE_THROWS_AS(m.backward(f, dy), std::invalid_argument);
            REQUIRE_THROWS_WITH(m.backward(f, dy), fn +
                                                       "fwd: comes from a module with other "
                                                       "options (" +
                                                       k.message + ")");
        } else {
            // The forward's projection, kernel, tiles and input copies are saved with it;
            // backward walks them back whatever this module would choose.
            const auto g = m.backward(f, dy);
            HEADWISE_CHECK_CLOSE(g.query, expected.query, 1e-12);
            HEADWISE_CHECK_CLOSE(g.key, expected.key, 1e-12);
            HEADWISE_CHECK_CLOSE(g.value, expected.value, 1e-12);
            const auto grads = m.grad_dict(), reference = a.grad_dict();
            for (const auto& [name, grad] : grads) {
                CAPTURE(name);
                HEADWISE_CHECK_CLOSE(grad, reference.at(name), 1e-12);
            }
        }
    }
}

TEST_CASE("options.scale is checked in the module's scalar type", "[mha][errors]") {
    // 1e300 is a finite double but inf in float, where every output would be NaN; 1e-300 and
    // 1e-40 underflow in float to 0 and a subnormal.
    const std::string fn = "headwise::MultiheadAttention::MultiheadAttention: options.scale: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    o.scale = 1e300;
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "must be finite in float (at most 3.4028235e+38 in magnitude), or "
                             "unset for 1 / sqrt(D), got 1e+300");
    CHECK_NOTHROW(MultiheadAttention<double>(o));
    o.scale = -1e39;
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "must be finite in float (at most 3.4028235e+38 in magnitude), or "
                             "unset for 1 / sqrt(D), got -1e+39");
    o.scale = std::numeric_limits<double>::infinity();
    REQUIRE_THROWS_WITH(MultiheadAttention<double>(o),
                        fn + "must be finite in double (at most 1.7976931348623157e+308 in "
                             "magnitude), or unset for 1 / sqrt(D), got inf");
    o.scale = std::numeric_limits<double>::quiet_NaN();
    REQUIRE_THROWS_AS(MultiheadAttention<double>(o), std::invalid_argument);
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);

    o.scale = 1e-300;
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "must be 0 or at least 1.1754944e-38 in magnitude in float (a "
                             "smaller one underflows), or unset for 1 / sqrt(D), got 1e-300");
    CHECK_NOTHROW(MultiheadAttention<double>(o));
    o.scale = 1e-40;  // a float subnormal
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    o.scale = 4e-320;  // a double subnormal
    REQUIRE_THROWS_WITH(MultiheadAttention<double>(o),
                        fn + "must be 0 or at least 2.2250738585072014e-308 in magnitude in "
                             "double (a smaller one underflows), or unset for 1 / sqrt(D), got "
                             "4e-320");

    // The largest finite and the smallest normal float, 0 and a negative scale are kept.
    for (double s : {3e38, -3e38, 1.2e-38, 0.0, -0.5}) {
        CAPTURE(s);
        o.scale = s;
        CHECK_NOTHROW(MultiheadAttention<float>(o));
        CHECK_NOTHROW(MultiheadAttention<double>(o));
    }
    o.scale = 1e300;
    const MultiheadAttention<double> m(o, 1);  // finite in double
    CHECK(*m.options().scale == 1e300);
}

}  // namespace test_mha_hostile_inputs
