// SPDX-License-Identifier: MIT
// MultiheadAttention: the reference loops as oracle, the three projections and the two attention
// kernels proven identical in outputs and in every gradient, masks, dropout, modes, state dicts
// and errors.
#include <headwise/headwise.hpp>

#include <cmath>   // std::isfinite
#include <string>  // std::string
#include <vector>  // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/mha_random.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"

namespace test_multihead_attention {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::MaskKind;
using headwise::test::MhaConfig;
using headwise::test::Tol;
using headwise::test::with;

namespace {

using headwise::test::kProjections;

/// The grid of shapes, masks and options every equivalence test runs over.
std::vector<MhaConfig> config_grid() {
    using C = MhaConfig&;
    return {
        MhaConfig{},                                              // self-attention, B=2, E=8, H=2
        with([](C c) { c.H = 1; }),                               // one head
        with([](C c) { c.H = 8; }),                               // H = E (D = 1)
        with([](C c) { c.B = 1, c.L = 1; }),                      // B = 1, L = 1
        with([](C c) { c.bias = false; }),                        // no biases
        with([](C c) { c.inputs = Inputs::kv_same, c.S = 5; }),   // cross, S != L, K is V
        with([](C c) { c.inputs = Inputs::distinct, c.S = 4; }),  // three distinct inputs
        with([](C c) { c.inputs = Inputs::distinct, c.S = 4, c.kdim = 5, c.vdim = 3; }),
        with([](C c) { c.inputs = Inputs::kv_same, c.S = 4, c.kdim = 6, c.vdim = 6; }),
        with([](C c) { c.bias_kv = true; }),
        with([](C c) { c.zero_attn = true; }),
        with([](C c) { c.bias_kv = true, c.zero_attn = true, c.masks = MaskKind::all; }),
        with([](C c) { c.masks = MaskKind::bool_ls; }),
        with([](C c) { c.masks = MaskKind::bias_ls; }),
        with([](C c) { c.masks = MaskKind::bool_4d, c.average = false; }),
        with([](C c) { c.masks = MaskKind::bias_4d; }),
        with([](C c) { c.masks = MaskKind::key_padding, c.inputs = Inputs::distinct, c.S = 5; }),
        with([](C c) { c.masks = MaskKind::causal, c.L = 4; }),
        with([](C c) { c.masks = MaskKind::all, c.inputs = Inputs::kv_same, c.S = 4, c.L = 5; }),
        with([](C c) { c.batched = false, c.L = 4, c.masks = MaskKind::all; }),
        with([](C c) { c.B = 3, c.L = 6, c.E = 12, c.H = 3, c.need_weights = false; }),
        with([](C c) { c.E = 16, c.H = 4, c.L = 5, c.average = false, c.bias_kv = true; }),
        with([](C c) { c.scale = 0.3, c.masks = MaskKind::all; }),  // a chosen scale
        with([](C c) {  // a chunk of 3 new queries over 6 keys, causal from the bottom right
            c.masks = MaskKind::causal, c.alignment = CausalAlignment::bottom_right;
            c.inputs = Inputs::kv_same, c.L = 3, c.S = 6;
        }),
        with([](C c) {  // more queries than keys: the first rows see only the appended key
            c.masks = MaskKind::causal, c.alignment = CausalAlignment::bottom_right;
            c.inputs = Inputs::distinct, c.L = 4, c.S = 2, c.bias_kv = true, c.average = false;
        }),
        // Grouped-query attention: 2 and 1 key/value heads for 4 query heads.
        with([](C c) { c.H = 4, c.Hkv = 2; }),
        with([](C c) {
            c.H = 4, c.Hkv = 1, c.inputs = Inputs::distinct, c.S = 4, c.kdim = 5, c.vdim = 3;
            c.masks = MaskKind::key_padding;
        }),
        with([](C c) {
            c.H = 4, c.Hkv = 2, c.inputs = Inputs::kv_same, c.S = 5, c.masks = MaskKind::all;
            c.bias_kv = true, c.zero_attn = true;
        }),
        with([](C c) { c.H = 4, c.Hkv = 2, c.masks = MaskKind::bool_4d, c.average = false; }),
        with([](C c) {
            c.E = 12, c.H = 6, c.Hkv = 3, c.batched = false, c.masks = MaskKind::bias_4d;
        }),
    };
}

template <class T>
AttentionForward<T> run(MultiheadAttention<T>& m, const test::MhaData<T>& d) {
    return m.forward(d.q, d.key(), d.value(), d.masks);
}

template <class T>
Tensor<T> upstream(const Shape& s) {
    std::mt19937_64 rng(1234);
    return Tensor<T>::randn(s, rng);
}

}  // namespace

TEMPLATE_TEST_CASE("MultiheadAttention matches the reference loops", "[mha]", float, double) {
    using T = TestType;
    for (const MhaConfig& c : config_grid()) {
        CAPTURE(c.str());
        const test::MhaData<T> d = test::make_data<T>(c);
        for (Projection p : kProjections) {
            CAPTURE(to_string(p));
            MultiheadAttention<T> m(c.options(p), 42);
            test::randomize_parameters(m, 43);  // biases, bias_k/v and out_proj included
            const AttentionForward<T> f = run(m, d);
            const test::ReferenceAttention r = test::run_reference(c, m, d);
            const Tensor<double> expected(f.output.shape(), r.output);
            HEADWISE_CHECK_CLOSE(f.output, expected, Tol<T>::rel);
            if (!c.need_weights) {
                CHECK(f.attn_weights.numel() == 0);
                continue;
            }
            const Index B = c.batched ? c.B : 1;
            Tensor<double> w(Shape{B, c.H, c.L, r.Sx}, r.weights);
            if (c.average) {
                Tensor<double> avg(Shape{B, c.L, r.Sx});
                for (Index b = 0; b < B; ++b)
                    for (Index h = 0; h < c.H; ++h)
                        for (Index i = 0; i < c.L; ++i)
                            for (Index j = 0; j < r.Sx; ++j)
                                avg(b, i, j) += w(b, h, i, j) / static_cast<double>(c.H);
                w = std::move(avg);
            }
            if (!c.batched) w = std::move(w).reshape(w.shape().drop_front());
            HEADWISE_CHECK_CLOSE(f.attn_weights, w, Tol<T>::rel);
        }
    }
}

TEMPLATE_TEST_CASE("fused, separate and per_head give identical outputs and gradients", "[mha]",
                   float, double) {
    using T = TestType;
    for (MhaConfig c : config_grid()) {
        for (double dropout : {0.0, 0.3}) {
            c.dropout = dropout;
            CAPTURE(c.str());
            const test::MhaData<T> d = test::make_data<T>(c);
            // Every parameter random, the same in each module (biases, bias_k/v, out_proj).
            MultiheadAttention<T> fused(c.options(Projection::fused), 42);
            test::randomize_parameters(fused, 43);
            const AttentionForward<T> f0 = run(fused, d);
            const Tensor<T> dy = upstream<T>(f0.output.shape());
            const AttentionGradients<T> g0 = fused.backward(f0, dy);
            for (Projection p : {Projection::separate, Projection::per_head}) {
                CAPTURE(to_string(p));
                MultiheadAttention<T> m(c.options(p), 42);
                test::randomize_parameters(m, 43);
                const AttentionForward<T> f = run(m, d);
                const AttentionGradients<T> g = m.backward(f, dy);
                HEADWISE_CHECK_CLOSE(f.output, f0.output, Tol<T>::rel);
                if (c.need_weights)
                    HEADWISE_CHECK_CLOSE(f.attn_weights, f0.attn_weights, Tol<T>::rel);
                HEADWISE_CHECK_CLOSE(g.query, g0.query, Tol<T>::rel);
                HEADWISE_CHECK_CLOSE(g.key, g0.key, Tol<T>::rel);
                HEADWISE_CHECK_CLOSE(g.value, g0.value, Tol<T>::rel);
                const auto grads0 = fused.grad_dict();
                const auto grads = m.grad_dict();
                REQUIRE(grads.size() == grads0.size());
                for (const auto& [name, grad] : grads0) {
                    CAPTURE(name);
                    HEADWISE_CHECK_CLOSE(grads.at(name), grad, Tol<T>::rel);
                }
            }
        }
    }
}

TEMPLATE_TEST_CASE("the blocked and materialised kernels agree in outputs, weights and gradients",
                   "[mha][blocked]", float, double) {
    using T = TestType;
    for (MhaConfig c : config_grid()) {
        for (double dropout : {0.0, 0.3}) {
            c.dropout = dropout;
            CAPTURE(c.str());
            const test::MhaData<T> d = test::make_data<T>(c);
            for (Projection p : kProjections) {
                CAPTURE(to_string(p));
                MultiheadAttentionOptions om = c.options(p), ob = c.options(p);
                om.attention_kernel = AttentionKernel::materialised;
                ob.attention_kernel = AttentionKernel::blocked;
                MultiheadAttention<T> mm(om, 42), mb(ob, 42);  // the same parameters and dropout
                const AttentionForward<T> fm = run(mm, d), fb = run(mb, d);
                const Tensor<T> dy = upstream<T>(fm.output.shape());
                const AttentionGradients<T> gm = mm.backward(fm, dy), gb = mb.backward(fb, dy);
                HEADWISE_CHECK_CLOSE(fb.output, fm.output, Tol<T>::rel);
                if (c.need_weights)
                    HEADWISE_CHECK_CLOSE(fb.attn_weights, fm.attn_weights, Tol<T>::rel);
                HEADWISE_CHECK_CLOSE(gb.query, gm.query, Tol<T>::rel);
                HEADWISE_CHECK_CLOSE(gb.key, gm.key, Tol<T>::rel);
                HEADWISE_CHECK_CLOSE(gb.value, gm.value, Tol<T>::rel);
                const auto grads_m = mm.grad_dict();
                const auto grads_b = mb.grad_dict();
                REQUIRE(grads_b.size() == grads_m.size());
                for (const auto& [name, grad] : grads_m) {
                    CAPTURE(name);
                    HEADWISE_CHECK_CLOSE(grads_b.at(name), grad, Tol<T>::rel);
                }
            }
        }
    }
}

TEST_CASE("fused self-attention gradients per argument sum to the gradient of the shared input",
          "[mha]") {
    // One tensor x as query, key and value: d/dx = g.query + g.key + g.value. Checked against
    // the same call made with three equal but distinct tensors.
    MhaConfig c;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> a(c.options(Projection::fused), 3);
    MultiheadAttention<double> b(c.options(Projection::fused), 3);
    const Tensor<double> k = d.q, v = d.q;  // copies: distinct storage
    const auto fa = a.forward(d.q, d.q, d.q);
    const auto fb = b.forward(d.q, k, v);
    const Tensor<double> dy = upstream<double>(fa.output.shape());
    const auto ga = a.backward(fa, dy);
    const auto gb = b.backward(fb, dy);
    HEADWISE_CHECK_CLOSE(ga.query, gb.query, 1e-13);
    HEADWISE_CHECK_CLOSE(ga.key, gb.key, 1e-13);
    HEADWISE_CHECK_CLOSE(ga.value, gb.value, 1e-13);
}

TEMPLATE_TEST_CASE("a query row with no visible key gives zeros, never NaN", "[mha][mask]", float,
                   double) {
    using T = TestType;
    const auto mask_kind = GENERATE(0, 1, 2, 3);  // attn_mask, key padding, -inf bias, 4-D mask
    const Projection p = GENERATE(from_range(kProjections));
    const AttentionKernel kernel =
        GENERATE(AttentionKernel::blocked, AttentionKernel::materialised);
    CAPTURE(mask_kind, to_string(p), to_string(kernel));
    MhaConfig c;
    c.inputs = Inputs::distinct;
    c.S = 4;
    c.L = 3;
    test::MhaData<T> d = test::make_data<T>(c);
    MultiheadAttentionOptions options = c.options(p);
    options.attention_kernel = kernel;
    MultiheadAttention<T> m(options, 5);
    // Non-zero biases so that "output = out_proj.bias" is a real statement.
    auto sd = m.state_dict();
    std::mt19937_64 rng(9);
    sd["in_proj_bias"] = Tensor<T>::randn(sd["in_proj_bias"].shape(), rng);
    sd["out_proj.bias"] = Tensor<T>::randn(sd["out_proj.bias"].shape(), rng);
    m.load_state_dict(sd);
    // Row 1 of batch 0 (or every row of batch 1 for key padding) sees nothing.
    if (mask_kind == 0) {
        d.masks.attn_mask = Tensor<bool>(Shape{c.L, c.S});
        for (Index j = 0; j < c.S; ++j) d.masks.attn_mask(1, j) = true;
    } else if (mask_kind == 1) {
        d.masks.key_padding_mask = Tensor<bool>(Shape{c.B, c.S});
        for (Index j = 0; j < c.S; ++j) d.masks.key_padding_mask(1, j) = true;
    } else if (mask_kind == 2) {
        d.masks.attn_bias = Tensor<T>(Shape{c.L, c.S});
        for (Index j = 0; j < c.S; ++j)
            d.masks.attn_bias(1, j) = -std::numeric_limits<T>::infinity();
    } else {
        d.masks.attn_mask = Tensor<bool>(Shape{c.B, c.H, c.L, c.S});
        for (Index h = 0; h < c.H; ++h)
            for (Index j = 0; j < c.S; ++j) d.masks.attn_mask(0, h, 1, j) = true;
    }
    const auto f = run(m, d);
    const auto g = m.backward(f, upstream<T>(f.output.shape()));
    auto all_finite = [](const Tensor<T>& t) {
        for (T x : t)
            if (!std::isfinite(x)) return false;
        return true;
    };
    CHECK(all_finite(f.output));
    CHECK(all_finite(f.attn_weights));
    CHECK(all_finite(g.query));
    CHECK(all_finite(g.key));
    CHECK(all_finite(g.value));
    for (const auto& [name, grad] : m.grad_dict()) {
        CAPTURE(name);
        CHECK(all_finite(grad));
    }
    const Tensor<T>& bo = sd["out_proj.bias"];
    auto check_row = [&](Index b, Index i) {
        for (Index e = 0; e < c.E; ++e) {
            CHECK(f.output(b, i, e) == bo(e));  // zero attention row: exactly the bias
            CHECK(g.query(b, i, e) == T(0));    // the query row influenced nothing
        }
        for (Index j = 0; j < c.S; ++j) CHECK(f.attn_weights(b, i, j) == T(0));
    };
    if (mask_kind == 1) {
        for (Index i = 0; i < c.L; ++i) check_row(1, i);
        for (Index j = 0; j < c.S; ++j)
            for (Index e = 0; e < c.E; ++e) {
                CHECK(g.key(1, j, e) == T(0));
                CHECK(g.value(1, j, e) == T(0));
            }
    } else {
        check_row(0, 1);
    }
}

TEST_CASE("add_bias_kv and add_zero_attn keep a fully masked row visible to the appended keys",
          "[mha][mask]") {
    // As in PyTorch, the appended keys are never masked, so the row is not empty: finite output
    // that differs from the bias.
    MhaConfig c;
    c.bias_kv = true;
    c.zero_attn = true;
    test::MhaData<double> d = test::make_data<double>(c);
    d.masks.attn_mask = Tensor<bool>::full(Shape{c.L, c.L}, true);
    MultiheadAttention<double> m(c.options(Projection::fused), 1);
    const auto f = run(m, d);
    const test::ReferenceAttention r = test::run_reference(c, m, d);
    HEADWISE_CHECK_CLOSE(f.output, Tensor<double>(f.output.shape(), r.output), 1e-12);
    CHECK(f.attn_weights(0, 0, c.L) > 0.0);
}

TEST_CASE("one module runs several forwards before their backwards", "[mha]") {
    // y = mha(mha(x)): the layer applied twice, backwards in reverse order, must accumulate the
    // parameter gradients of both applications.
    MhaConfig c;
    c.dropout = 0.2;
    const test::MhaData<double> d = test::make_data<double>(c);
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(to_string(p));
    MultiheadAttention<double> m(c.options(p), 11);
    const auto f1 = m.forward(d.q, d.q, d.q);
    const auto f2 = m.forward(f1.output, f1.output, f1.output);
    const Tensor<double> dy = upstream<double>(f2.output.shape());
    const auto g2 = m.backward(f2, dy);
    Tensor<double> dy1 = g2.query;
    for (Index i = 0; i < dy1.numel(); ++i) dy1.data()[i] += g2.key.data()[i] + g2.value.data()[i];
    const auto g1 = m.backward(f1, dy1);
    const auto total = m.grad_dict();

    // The same by two modules that each see one application (same seed: same dropout masks).
    MultiheadAttention<double> a(c.options(p), 11), b(c.options(p), 11);
    const auto fa = a.forward(d.q, d.q, d.q);
    b.forward(d.q, d.q, d.q);  // advance b's dropout stream past the first call
    const auto fb = b.forward(fa.output, fa.output, fa.output);
    const auto gb = b.backward(fb, dy);
    const auto ga = a.backward(fa, dy1);
    HEADWISE_CHECK_CLOSE(fb.output, f2.output, 1e-14);
    // Each backward returns its own call's input gradients.
    HEADWISE_CHECK_CLOSE(g2.query, gb.query, 1e-14);
    HEADWISE_CHECK_CLOSE(g2.key, gb.key, 1e-14);
    HEADWISE_CHECK_CLOSE(g2.value, gb.value, 1e-14);
    HEADWISE_CHECK_CLOSE(g1.query, ga.query, 1e-14);
    HEADWISE_CHECK_CLOSE(g1.key, ga.key, 1e-14);
    HEADWISE_CHECK_CLOSE(g1.value, ga.value, 1e-14);
    for (const auto& [name, grad] : total) {
        CAPTURE(name);
        Tensor<double> sum = a.grad_dict().at(name);
        const Tensor<double> gbn = b.grad_dict().at(name);
        for (Index i = 0; i < sum.numel(); ++i) sum.data()[i] += gbn.data()[i];
        HEADWISE_CHECK_CLOSE(grad, sum, 1e-13);
    }
}

TEST_CASE("zero_grad clears every gradient, and backward adds until then", "[mha]") {
    MhaConfig c;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> m(c.options(Projection::fused), 2);
    const auto f = run(m, d);
    const Tensor<double> dy = upstream<double>(f.output.shape());
    m.backward(f, dy);
    const auto once = m.grad_dict();
    m.backward(f, dy);
    for (const auto& [name, grad] : m.grad_dict()) {
        CAPTURE(name);
        Tensor<double> twice = once.at(name);
        for (double& x : twice) x *= 2;
        HEADWISE_CHECK_CLOSE(grad, twice, 1e-15);
    }
    m.zero_grad();
    for (const auto& [name, grad] : m.grad_dict())
        for (double x : grad) CHECK(x == 0.0);
}

TEST_CASE("eval mode: no dropout, nothing saved, backward refuses", "[mha]") {
    MhaConfig c;
    c.dropout = 0.5;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> m(c.options(Projection::fused), 2);
    CHECK(m.is_training());
    const auto train1 = run(m, d);
    const auto train2 = run(m, d);
    CHECK(train1.differentiable());
    CHECK(test::scaled_difference(train1.output, train2.output).rel > 1e-3);  // fresh masks
    m.eval();
    const auto e1 = run(m, d);
    const auto e2 = run(m, d);
    CHECK_FALSE(e1.differentiable());
    HEADWISE_CHECK_CLOSE(e1.output, e2.output, 0.0);
    MhaConfig nodrop = c;
    nodrop.dropout = 0.0;
    MultiheadAttention<double> ref(nodrop.options(Projection::fused), 2);
    HEADWISE_CHECK_CLOSE(e1.output, run(ref, d).output, 1e-15);
    REQUIRE_THROWS_AS(m.backward(e1, e1.output), std::invalid_argument);
    REQUIRE_THROWS_WITH(m.backward(e1, e1.output),
                        "headwise::MultiheadAttention::backward: fwd: holds nothing to "
                        "differentiate (forward ran in eval mode); call train() before forward");
    m.train();
    CHECK(run(m, d).differentiable());
}

TEST_CASE("swap_eval_buffers passes eval scratch between modules without changing results",
          "[mha]") {
    // Two modules of different shapes and projections, as layers of a stack might be.
    MhaConfig ca;
    MhaConfig cb =
        with([](MhaConfig& c) { c.E = 12, c.H = 3, c.L = 5, c.inputs = Inputs::kv_same, c.S = 4; });
    const test::MhaData<double> da = test::make_data<double>(ca);
    const test::MhaData<double> db = test::make_data<double>(cb);
    MultiheadAttention<double> a(ca.options(Projection::fused), 2);
    MultiheadAttention<double> b(cb.options(Projection::per_head), 3);
    a.eval();
    b.eval();
    const MultiheadAttention<double> a0 = a, b0 = b;  // copies start with scratch of their own
    const auto ya = run(a, da);
    b.swap_eval_buffers(a);  // b now holds the scratch a's call filled
    const auto yb = run(b, db);
    a.swap_eval_buffers(b);
    MultiheadAttention<double> fresh_a = a0, fresh_b = b0;
    HEADWISE_CHECK_CLOSE(yb.output, run(fresh_b, db).output, 0.0);
    HEADWISE_CHECK_CLOSE(run(a, da).output, run(fresh_a, da).output, 0.0);
    HEADWISE_CHECK_CLOSE(ya.output, run(fresh_a, da).output, 0.0);
}

TEST_CASE("dropout is inverted, seeded, and the same under every projection", "[mha][dropout]") {
    MhaConfig c;
    c.L = 16;
    c.dropout = 0.25;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> a(c.options(Projection::fused), 8),
        b(c.options(Projection::per_head), 8);
    const auto fa = run(a, d);
    const auto fb = run(b, d);
    HEADWISE_CHECK_CLOSE(fa.attn_weights, fb.attn_weights, 1e-15);
    // Kept weights are scaled by 1 / (1 - p); about p of them are dropped.
    c.dropout = 0.0;
    MultiheadAttention<double> plain(c.options(Projection::fused), 8);
    test::MhaData<double> d2 = d;
    d2.masks.average_attn_weights = false;
    c.dropout = 0.25;
    MultiheadAttention<double> dropped(c.options(Projection::fused), 8);
    const auto fp = plain.forward(d2.q, d2.q, d2.q, d2.masks);
    const auto fd = dropped.forward(d2.q, d2.q, d2.q, d2.masks);
    Index zeros = 0;
    for (Index i = 0; i < fp.attn_weights.numel(); ++i) {
        const double w = fd.attn_weights.data()[i];
        if (w == 0.0) {
            ++zeros;
        } else {
            CHECK_THAT(w, WithinRel(fp.attn_weights.data()[i] / 0.75, 1e-12));
        }
    }
    const double frac = static_cast<double>(zeros) / static_cast<double>(fp.attn_weights.numel());
    CHECK(frac > 0.2);
    CHECK(frac < 0.3);
}

TEST_CASE("an unbatched call equals the batched call with B = 1", "[mha]") {
    MhaConfig c;
    c.B = 1;
    c.masks = MaskKind::all;
    c.inputs = Inputs::distinct;
    c.S = 4;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> m(c.options(Projection::per_head), 4);
    const auto fb = run(m, d);
    test::MhaData<double> u = d;
    u.q = Tensor<double>(d.q.view().reshape(d.q.shape().drop_front()));
    u.k = Tensor<double>(d.k.view().reshape(d.k.shape().drop_front()));
    u.v = Tensor<double>(d.v.view().reshape(d.v.shape().drop_front()));
    u.masks.key_padding_mask = Tensor<bool>(d.masks.key_padding_mask.view().reshape(Shape{c.S}));
    const auto fu = run(m, u);
    REQUIRE(fu.output.shape() == Shape{c.L, c.E});
    REQUIRE(fu.attn_weights.shape() == Shape{c.L, c.S});
    HEADWISE_CHECK_CLOSE(fu.output.view().reshape(fb.output.shape()), fb.output, 0.0);
    const Tensor<double> dy = upstream<double>(fb.output.shape());
    const auto gb = m.backward(fb, dy);
    const auto gu = m.backward(fu, dy.view().reshape(fu.output.shape()));
    REQUIRE(gu.query.shape() == u.q.shape());
    REQUIRE(gu.key.shape() == u.k.shape());
    REQUIRE(gu.value.shape() == u.v.shape());
    HEADWISE_CHECK_CLOSE(gu.query.view().reshape(gb.query.shape()), gb.query, 0.0);
    HEADWISE_CHECK_CLOSE(gu.key.view().reshape(gb.key.shape()), gb.key, 0.0);
    HEADWISE_CHECK_CLOSE(gu.value.view().reshape(gb.value.shape()), gb.value, 0.0);
}

TEST_CASE("state_dict uses PyTorch's names and shapes", "[mha][state]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    SECTION("packed in-projection") {
        MultiheadAttention<float> m(o, 0);
        const auto sd = m.state_dict();
        REQUIRE(sd.size() == 4);
        CHECK(sd.at("in_proj_weight").shape() == Shape{24, 8});
        CHECK(sd.at("in_proj_bias").shape() == Shape{24});
        CHECK(sd.at("out_proj.weight").shape() == Shape{8, 8});
        CHECK(sd.at("out_proj.bias").shape() == Shape{8});
        CHECK(m.parameter_count() == 4 * 8 * 8 + 4 * 8);
    }
    SECTION("kdim and vdim differ from embed_dim, biases off, bias_kv on") {
        o.kdim = 5;
        o.vdim = 3;
        o.bias = false;
        o.add_bias_kv = true;
        MultiheadAttention<float> m(o, 0);
        const auto sd = m.state_dict();
        REQUIRE(sd.size() == 6);
        CHECK(sd.at("q_proj_weight").shape() == Shape{8, 8});
        CHECK(sd.at("k_proj_weight").shape() == Shape{8, 5});
        CHECK(sd.at("v_proj_weight").shape() == Shape{8, 3});
        CHECK(sd.at("bias_k").shape() == Shape{1, 1, 8});
        CHECK(sd.at("bias_v").shape() == Shape{1, 1, 8});
        CHECK(sd.at("out_proj.weight").shape() == Shape{8, 8});
        CHECK(m.grad_dict().size() == sd.size());
        CHECK(m.parameter_count() == 8 * (8 + 5 + 3) + 64 + 16);
    }
}

TEST_CASE("load_state_dict is strict and changes nothing on error", "[mha][state]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    MultiheadAttention<double> m(o, 0);
    const auto before = m.state_dict();
    auto sd = before;
    sd["in_proj_bias"].fill(1.0);
    SECTION("round trip") {
        m.load_state_dict(sd);
        CHECK(m.state_dict().at("in_proj_bias")(3) == 1.0);
    }
    SECTION("missing entry") {
        sd.erase("out_proj.bias");
        REQUIRE_THROWS_AS(m.load_state_dict(sd), std::invalid_argument);
        REQUIRE_THROWS_WITH(m.load_state_dict(sd),
                            "headwise::MultiheadAttention::load_state_dict: out_proj.bias: missing "
                            "from the state dict, expected shape [8]");
    }
    SECTION("unexpected entry") {
        sd["q_proj_weight"] = Tensor<double>(Shape{8, 8});
        REQUIRE_THROWS_WITH(m.load_state_dict(sd),
                            "headwise::MultiheadAttention::load_state_dict: q_proj_weight: "
                            "unexpected key in the state dict (shape [8, 8]); expected keys: "
                            "in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias");
    }
    SECTION("wrong shape") {
        sd["out_proj.weight"] = Tensor<double>(Shape{8, 7});
        REQUIRE_THROWS_AS(m.load_state_dict(sd), shape_error);
        REQUIRE_THROWS_WITH(m.load_state_dict(sd),
                            "headwise::MultiheadAttention::load_state_dict: out_proj.weight: "
                            "expected shape [8, 8], got [8, 7]");
    }
}

TEST_CASE("a failed load_state_dict leaves every parameter as it was", "[mha][state]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    MultiheadAttention<double> m(o, 0);
    const auto before = m.state_dict();
    auto sd = before;
    for (auto& [name, t] : sd) t.fill(3.0);          // every entry valid ...
    sd["out_proj.bias"] = Tensor<double>(Shape{7});  // ... but the last one checked
    REQUIRE_THROWS_AS(m.load_state_dict(sd), shape_error);
    for (const auto& [name, t] : m.state_dict()) {
        CAPTURE(name);
        HEADWISE_CHECK_CLOSE(t, before.at(name), 0.0);
    }
}

TEST_CASE("per-head matrices are views of the packed parameters", "[mha][state]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 12;
    o.num_heads = 3;
    o.kdim = 5;
    o.vdim = 7;
    MultiheadAttention<double> m(o, 1);
    const auto sd = m.state_dict();
    const Index D = 4;
    for (Index h = 0; h < 3; ++h) {
        const HeadParameters<double> head = m.head(h);
        REQUIRE(head.q_weight().shape() == Shape{D, 12});
        REQUIRE(head.k_weight().shape() == Shape{D, 5});
        REQUIRE(head.v_weight().shape() == Shape{D, 7});
        REQUIRE(head.q_bias().shape() == Shape{D});
        for (Index r = 0; r < D; ++r) {
            for (Index e = 0; e < 12; ++e)
                CHECK(head.q_weight()(r, e) == sd.at("q_proj_weight")(h * D + r, e));
            for (Index e = 0; e < 5; ++e)
                CHECK(head.k_weight()(r, e) == sd.at("k_proj_weight")(h * D + r, e));
            for (Index e = 0; e < 7; ++e)
                CHECK(head.v_weight()(r, e) == sd.at("v_proj_weight")(h * D + r, e));
            CHECK(head.v_bias()(r) == sd.at("in_proj_bias")(2 * 12 + h * D + r));
        }
    }
    // Views, not copies: a load shows through an existing view.
    const HeadParameters<double> head1 = m.head(1);
    auto sd2 = sd;
    sd2["k_proj_weight"].fill(0.5);
    m.load_state_dict(sd2);
    CHECK(head1.k_weight()(2, 3) == 0.5);
    REQUIRE_THROWS_WITH(m.head(3),
                        "headwise::MultiheadAttention::head: i: must be in [0, 3), got 3");
}

TEST_CASE("with_projection keeps parameters and gradients", "[mha]") {
    MhaConfig c;
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> m(c.options(Projection::fused), 3);
    const auto f0 = run(m, d);
    m.backward(f0, f0.output);
    const auto grads = m.grad_dict();
    CHECK(&m.with_projection(Projection::per_head) == &m);
    CHECK(m.projection() == Projection::per_head);
    for (const auto& [name, g] : m.grad_dict()) HEADWISE_CHECK_CLOSE(g, grads.at(name), 0.0);
    HEADWISE_CHECK_CLOSE(run(m, d).output, f0.output, 1e-14);
    // A backward after switching still differentiates the call as it was computed: it adds
    // exactly what the first backward added.
    m.zero_grad();
    m.backward(f0, f0.output);
    for (const auto& [name, g] : m.grad_dict()) {
        CAPTURE(name);
        HEADWISE_CHECK_CLOSE(g, grads.at(name), 0.0);
    }
}

TEST_CASE("a new module has PyTorch's initial distributions", "[mha][init]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 64;
    o.num_heads = 4;
    o.add_bias_kv = true;
    MultiheadAttention<double> m(o, 123);
    const auto sd = m.state_dict();
    auto max_abs = [](const Tensor<double>& t) {
        double x = 0;
        for (double v : t) x = std::max(x, std::abs(v));
        return x;
    };
    auto variance = [](const Tensor<double>& t) {
        double s = 0;
        for (double v : t) s += v * v;
        return s / static_cast<double>(t.numel());
    };
    // xavier_uniform on [3E, E]: bound sqrt(6 / (E + 3E)); variance bound^2 / 3.
    const double xb = std::sqrt(6.0 / (64.0 + 192.0));
    CHECK(max_abs(sd.at("in_proj_weight")) <= xb);
    CHECK_THAT(variance(sd.at("in_proj_weight")), WithinRel(xb * xb / 3.0, 0.05));
    // kaiming_uniform(a = sqrt 5) on [E, E]: bound 1 / sqrt(E).
    const double kb = 1.0 / 8.0;
    CHECK(max_abs(sd.at("out_proj.weight")) <= kb);
    CHECK_THAT(variance(sd.at("out_proj.weight")), WithinRel(kb * kb / 3.0, 0.1));
    CHECK(max_abs(sd.at("in_proj_bias")) == 0.0);
    CHECK(max_abs(sd.at("out_proj.bias")) == 0.0);
    // xavier_normal on [1, 1, E]: variance 1 / E.
    CHECK(max_abs(sd.at("bias_k")) > 0.0);
    // Same seed, same parameters; another seed, others.
    MultiheadAttention<double> same(o, 123), other(o, 124);
    HEADWISE_CHECK_CLOSE(same.state_dict().at("in_proj_weight"), sd.at("in_proj_weight"), 0.0);
    CHECK(test::scaled_difference(other.state_dict().at("in_proj_weight"), sd.at("in_proj_weight"))
              .rel > 0.1);
}

TEST_CASE("bad options throw a clear error", "[mha][errors]") {
    const std::string fn = "headwise::MultiheadAttention::MultiheadAttention: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 10;
    o.num_heads = 3;
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options.num_heads: must divide embed_dim = 10, got 3");
    o.num_heads = 0;
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options.num_heads: must be positive, got 0");
    o = MultiheadAttentionOptions{};
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options.embed_dim: must be positive, got 0");
    o.embed_dim = 8;
    o.kdim = -1;
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options.kdim: must be positive, or 0 for embed_dim, got -1");
    o.kdim = 0;
    o.vdim = -2;
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options.vdim: must be positive, or 0 for embed_dim, got -2");
    o.vdim = 0;
    o.dropout = 1.0;
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options.dropout: must be in [0, 1), got 1.000000");
}

TEST_CASE("bad shapes throw shape_error naming function, argument, expected and actual shape",
          "[mha][errors]") {
    const std::string fn = "headwise::MultiheadAttention::forward: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    o.kdim = 6;
    o.dropout = 0.5;
    MultiheadAttention<double> m(o, 3);
    const Tensor<double> q(Shape{2, 3, 8}), k(Shape{2, 4, 6}), v(Shape{2, 4, 8});
    auto fails = [&](const Tensor<double>& qq, const Tensor<double>& kk, const Tensor<double>& vv,
                     const AttentionMasks<double>& masks, const std::string& message) {
        CAPTURE(message);
        REQUIRE_THROWS_AS(m.forward(qq, kk, vv, masks), shape_error);
        REQUIRE_THROWS_WITH(m.forward(qq, kk, vv, masks), fn + message);
    };
    const AttentionMasks<double> none;
    fails(Tensor<double>(Shape{2, 3, 7}), k, v, none,
          "query: expected shape [B, L, 8], got [2, 3, 7]");
    fails(Tensor<double>(Shape{3, 8, 1, 1}), k, v, none,
          "query: expected shape [B, L, 8] or [L, 8], got [3, 8, 1, 1]");
    fails(q, Tensor<double>(Shape{2, 4, 8}), v, none,
          "key: expected shape [2, S, 6], got [2, 4, 8]");
    fails(q, Tensor<double>(Shape{3, 4, 6}), v, none,
          "key: expected shape [2, S, 6], got [3, 4, 6]");
    fails(q, Tensor<double>(Shape{4, 6}), v, none, "key: expected shape [2, S, 6], got [4, 6]");
    fails(q, k, Tensor<double>(Shape{2, 5, 8}), none,
          "value: expected shape [2, 4, 8], got [2, 5, 8]");
    fails(Tensor<double>(Shape{3, 8}), Tensor<double>(Shape{4, 6}), Tensor<double>(Shape{4, 7}),
          none, "value: expected shape [4, 8], got [4, 7]");
    AttentionMasks<double> bad;
    bad.attn_mask = Tensor<bool>(Shape{4, 3});
    fails(q, k, v, bad, "masks.attn_mask: expected shape [3, 4] or [2, 2, 3, 4], got [4, 3]");
    bad = {};
    bad.attn_bias = Tensor<double>(Shape{2, 1, 3, 4});
    fails(q, k, v, bad, "masks.attn_bias: expected shape [3, 4] or [2, 2, 3, 4], got [2, 1, 3, 4]");
    bad = {};
    bad.key_padding_mask = Tensor<bool>(Shape{2, 3});
    fails(q, k, v, bad, "masks.key_padding_mask: expected shape [2, 4], got [2, 3]");

    // Nothing changed: the dropout stream did not advance, so the next call equals a fresh one's.
    MultiheadAttention<double> fresh(o, 3);
    std::mt19937_64 rng(1);
    const Tensor<double> qr = Tensor<double>::randn(q.shape(), rng),
                         kr = Tensor<double>::randn(k.shape(), rng),
                         vr = Tensor<double>::randn(v.shape(), rng);
    const auto f = m.forward(qr, kr, vr);
    HEADWISE_CHECK_CLOSE(f.output, fresh.forward(qr, kr, vr).output, 0.0);

    // backward checks its gradient before touching the parameter gradients.
    REQUIRE_THROWS_AS(m.backward(f, Tensor<double>(Shape{2, 3, 4})), shape_error);
    REQUIRE_THROWS_WITH(m.backward(f, Tensor<double>(Shape{2, 3, 4})),
                        "headwise::MultiheadAttention::backward: grad_output: expected shape "
                        "[2, 3, 8], got [2, 3, 4]");
    for (const auto& [name, g] : m.grad_dict())
        for (double x : g) CHECK(x == 0.0);
}

TEST_CASE("inputs sharing memory are told apart by pointer and shape, never by pointer alone",
          "[mha][aliasing]") {
    // Each call passes views that share memory; the same call with separate copies must give the
    // same output, weights and gradients under every projection. A module that took a shared
    // pointer for a shared tensor would project the wrong rows or features here.
    struct Aliasing {
        const char* what;
        Index kdim, vdim;
        Shape q, k, v;  // shapes of the views, all starting at the same buffer or at K
        bool k_in_query, v_in_query;  // else in the separate buffer K
    };
    const Aliasing cases[] = {
        {"key and value a prefix of the query", 8, 8, {2, 4, 8}, {2, 3, 8}, {2, 3, 8}, true, true},
        {"key is the query, value the same memory with fewer features",
         8,
         4,
         {2, 4, 8},
         {2, 4, 8},
         {2, 4, 4},
         true,
         true},
        {"key the query's memory as [2, 8, 4]", 4, 8, {2, 4, 8}, {2, 8, 4}, {2, 8, 8}, true, false},
        {"key == value, query separate", 8, 8, {2, 4, 8}, {2, 5, 8}, {2, 5, 8}, false, false},
        {"key and value the same memory, other features",
         8,
         4,
         {2, 4, 8},
         {2, 5, 8},
         {2, 5, 4},
         false,
         false},
    };
    std::mt19937_64 rng(31);
    const Tensor<double> X = Tensor<double>::randn(Shape{2, 4, 8}, rng);  // [B, L, E]
    const Tensor<double> K = Tensor<double>::randn(Shape{2 * 8 * 8}, rng);
    for (const Aliasing& a : cases) {
        for (Projection p : kProjections) {
            CAPTURE(a.what, to_string(p));
            MultiheadAttentionOptions o;
            o.embed_dim = 8;
            o.num_heads = 2;
            o.kdim = a.kdim;
            o.vdim = a.vdim;
            o.dropout = 0.2;
            o.projection = p;
            const TensorView<const double> q = view(X.data(), a.q);
            const TensorView<const double> k = view(a.k_in_query ? X.data() : K.data(), a.k);
            const TensorView<const double> v = view(a.v_in_query ? X.data() : K.data(), a.v);
            const Tensor<double> qc(q), kc(k), vc(v);  // separate copies
            MultiheadAttention<double> shared(o, 5), copied(o, 5);
            test::randomize_parameters(shared, 6);
            test::randomize_parameters(copied, 6);
            AttentionMasks<double> masks;
            masks.need_weights = true;
            masks.average_attn_weights = false;
            const auto fs = shared.forward(q, k, v, masks);
            const auto fc = copied.forward(qc, kc, vc, masks);
            HEADWISE_CHECK_CLOSE(fs.output, fc.output, Tol<double>::rel);
            HEADWISE_CHECK_CLOSE(fs.attn_weights, fc.attn_weights, Tol<double>::rel);
            const Tensor<double> dy = upstream<double>(fs.output.shape());
            const auto gs = shared.backward(fs, dy);
            const auto gc = copied.backward(fc, dy);
            HEADWISE_CHECK_CLOSE(gs.query, gc.query, Tol<double>::rel);
            HEADWISE_CHECK_CLOSE(gs.key, gc.key, Tol<double>::rel);
            HEADWISE_CHECK_CLOSE(gs.value, gc.value, Tol<double>::rel);
            const auto grads = copied.grad_dict();
            for (const auto& [name, g] : shared.grad_dict()) {
                CAPTURE(name);
                HEADWISE_CHECK_CLOSE(g, grads.at(name), Tol<double>::rel);
            }
        }
    }
}

}  // namespace test_multihead_attention
