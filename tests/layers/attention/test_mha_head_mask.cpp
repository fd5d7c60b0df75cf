// SPDX-License-Identifier: MIT
// Head masks (AttentionMasks::head_mask, Hugging Face's head_mask) and their gradient
// (AttentionMasks::head_mask_grad, Michel et al. 2019's head importance): forward against the
// reference loops on every projection and kernel, backward and the gates' gradient against
// central differences in double, decode against forward, and the shape errors.
#include <headwise/headwise.hpp>

#include <algorithm>  // std::min
#include <random>     // std::mt19937_64
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/mha_random.hpp"
#include "support/projections.hpp"

namespace test_mha_head_mask {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::kProjections;
using headwise::test::MaskKind;
using headwise::test::MhaConfig;
using headwise::test::with;

namespace {

using C = MhaConfig&;

/// Configurations with a head mask: [H] or [B, H] (batched_gates), some gates 0.
struct GateCase {
    MhaConfig config;
    bool batched_gates;
};

std::vector<GateCase> grid() {
    return {
        {with([](C c) { c.H = 4, c.E = 8; }), false},
        {with([](C c) {
             c.H = 2, c.masks = MaskKind::all, c.bias_kv = true, c.zero_attn = true;
             c.average = false;
         }),
         true},
        {with([](C c) {
             c.E = 6, c.H = 4, c.Hkv = 2, c.head_dim = 3, c.inputs = Inputs::distinct, c.S = 4;
             c.kdim = 5, c.vdim = 3, c.masks = MaskKind::key_padding, c.average = false;
         }),
         true},
        {with([](C c) {
             c.E = 8, c.H = 4, c.Hkv = 1, c.inputs = Inputs::kv_same, c.S = 5;
             c.masks = MaskKind::causal, c.rotary.enabled = true;
         }),
         false},
        {with([](C c) { c.H = 2, c.batched = false, c.masks = MaskKind::bias_4d; }), false},
    };
}

/// Gates drawn from a normal distribution, one of them 0 (a removed head).
Tensor<double> gates_for(const GateCase& g) {
    const MhaConfig& c = g.config;
    const Index B = c.batched ? c.B : 1;
    std::mt19937_64 rng(21);
    Tensor<double> xi = Tensor<double>::randn(g.batched_gates ? Shape{B, c.H} : Shape{c.H}, rng);
    xi.data()[1] = 0.0;
    return xi;
}

MultiheadAttentionOptions options_for(const MhaConfig& c, Projection p, AttentionKernel kernel) {
    MultiheadAttentionOptions o = c.options(p);
    o.attention_kernel = kernel;
    o.attention_tiles = {2, 3};
    return o;
}

/// The reference's weights as the module returns them (see test_mha_head_dim.cpp).
Tensor<double> expected_weights(const MhaConfig& c, const test::ReferenceAttention& r) {
    const Index B = c.batched ? c.B : 1, H = c.H, L = c.L, Sx = r.Sx;
    if (!c.average) {
        Tensor<double> w(Shape{B, H, L, Sx}, r.weights);
        return c.batched ? w : std::move(w).reshape(Shape{H, L, Sx});
    }
    Tensor<double> w(Shape{B, L, Sx});
    for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h)
            for (Index i = 0; i < L * Sx; ++i)
                w.data()[b * L * Sx + i] +=
                    r.weights[static_cast<std::size_t>((b * H + h) * L * Sx + i)] /
                    static_cast<double>(H);
    return c.batched ? w : std::move(w).reshape(Shape{L, Sx});
}

/// gradcheck over every input, every parameter and the gates of `g` on projection `p`, the
/// gates' gradient read from masks.head_mask_grad.
GradcheckResult gradcheck_gates(const GateCase& g, Projection p, AttentionKernel kernel) {
    const MhaConfig& c = g.config;
    const test::MhaData<double> d = test::make_data<double>(c);
    const MultiheadAttention<double> init(c.options(p), 17);
    std::vector<std::string> names;
    std::vector<Tensor<double>> inputs{d.q};
    if (c.inputs != Inputs::self) inputs.push_back(d.k);
    if (c.inputs == Inputs::distinct) inputs.push_back(d.v);
    const std::size_t n_args = inputs.size();
    inputs.push_back(gates_for(g));
    std::mt19937_64 prng(5);
    for (const auto& [name, t] : init.state_dict()) {
        names.push_back(name);
        inputs.push_back(
            name.find("bias") != std::string::npos ? Tensor<double>::randn(t.shape(), prng) : t);
    }
    const auto o = options_for(c, p, kernel);
    const auto run = [=](const std::vector<Tensor<double>>& x, MultiheadAttention<double>& m,
                         TensorView<double> dxi) {
        StateDict<double> sd;
        for (std::size_t i = 0; i < names.size(); ++i) sd[names[i]] = x[n_args + 1 + i];
        m.load_state_dict(sd);
        AttentionMasks<double> masks = d.masks;
        masks.head_mask = x[n_args];
        masks.head_mask_grad = dxi;
        const Tensor<double>& k = n_args > 1 ? x[1] : x[0];
        return m.forward(x[0], k, n_args > 2 ? x[2] : k, masks);
    };
    const auto f = [=](const std::vector<Tensor<double>>& x) {
        MultiheadAttention<double> m(o, 99);
        return run(x, m, {}).output;
    };
    const auto back = [=](const std::vector<Tensor<double>>& x, const Tensor<double>& dy) {
        MultiheadAttention<double> m(o, 99);
        Tensor<double> dxi(x[n_args].shape());
        AttentionBackwardOptions bo;
        bo.combine_self = true;
        const AttentionGradients<double> gr = m.backward(run(x, m, dxi), dy, bo);
        std::vector<Tensor<double>> out;
        if (n_args == 1) {
            out.push_back(gr.input);
        } else if (n_args == 2) {
            Tensor<double> s = gr.key;
            for (Index i = 0; i < s.numel(); ++i) s.data()[i] += gr.value.data()[i];
            out.insert(out.end(), {gr.query, s});
        } else {
            out.insert(out.end(), {gr.query, gr.key, gr.value});
        }
        out.push_back(dxi);
        const auto grads = m.grad_dict();
        for (const std::string& name : names) out.push_back(grads.at(name));
        return out;
    };
    std::mt19937_64 rng(3);
    GradcheckOptions options;
    options.eps = 1e-5;
    return gradcheck(f, back, inputs, rng, options);
}

}  // namespace

TEST_CASE("head_mask multiplies each head's probabilities: forward equals the reference loops",
          "[mha][head_mask]") {
    for (const GateCase& g : grid())
        for (Projection p : kProjections)
            for (AttentionKernel kernel :
                 {AttentionKernel::materialised, AttentionKernel::blocked}) {
                const MhaConfig& c = g.config;
                CAPTURE(c.str(), g.batched_gates, to_string(p), to_string(kernel));
                MultiheadAttention<double> m(options_for(c, p, kernel), 42);
                test::randomize_parameters(m, 8);
                test::MhaData<double> d = test::make_data<double>(c);
                d.masks.head_mask = gates_for(g);
                const test::ReferenceAttention r = test::run_reference(c, m, d);
                for (bool training : {true, false}) {
                    m.train(training);
                    const auto f = m.forward(d.q, d.key(), d.value(), d.masks);
                    HEADWISE_CHECK_CLOSE(f.output, Tensor<double>(f.output.shape(), r.output),
                                         1e-12);
                    HEADWISE_CHECK_CLOSE(f.attn_weights, expected_weights(c, r), 1e-12);
                }
            }
}

TEST_CASE("head_mask: gradients of inputs, parameters and the gates match finite differences",
          "[mha][head_mask][gradcheck]") {
    for (const GateCase& g : grid())
        for (Projection p : kProjections)
            for (AttentionKernel kernel :
                 {AttentionKernel::materialised, AttentionKernel::blocked}) {
                CAPTURE(g.config.str(), g.batched_gates, to_string(p), to_string(kernel));
                const GradcheckResult r = gradcheck_gates(g, p, kernel);
                INFO("worst: " << r.where << " (relative " << r.max_rel_error << ", " << r.checked
                               << " partials)");
                CHECK(r.checked > 100);
                CHECK(r.max_rel_error <= 1e-6);
            }
    // With dropout: the gates multiply the dropped probabilities (the same mask each run).
    GateCase dropped{with([](C c) { c.H = 4, c.E = 8, c.dropout = 0.3; }), true};
    const GradcheckResult r =
        gradcheck_gates(dropped, Projection::fused, AttentionKernel::automatic);
    INFO("worst: " << r.where << " (relative " << r.max_rel_error << ")");
    CHECK(r.max_rel_error <= 1e-6);
}

TEST_CASE("head_mask_grad alone gates with ones and accumulates like a parameter gradient",
          "[mha][head_mask]") {
    const MhaConfig c = with([](C cfg) { cfg.H = 4, cfg.E = 8, cfg.masks = MaskKind::causal; });
    const test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttention<double> m(c.options(Projection::fused), 3);
    test::randomize_parameters(m, 4);
    std::mt19937_64 rng(6);
    const Tensor<double> dy = Tensor<double>::randn(Shape{c.B, c.L, c.E}, rng);
    // Explicit ones, the gradient per batch.
    AttentionMasks<double> ones = d.masks;
    ones.head_mask = Tensor<double>(Shape{c.B, c.H}, std::vector<double>(8, 1.0));
    Tensor<double> per_batch(Shape{c.B, c.H});
    ones.head_mask_grad = per_batch;
    const auto f1 = m.forward(d.q, d.q, d.q, ones);
    m.backward(f1, dy);
    const auto grads_ones = m.grad_dict();
    // No head_mask: ones; the gradient asked for [H] sums the batches, and adds.
    m.zero_grad();
    AttentionMasks<double> asked = d.masks;
    Tensor<double> summed(Shape{c.H});
    asked.head_mask_grad = summed;
    const auto f2 = m.forward(d.q, d.q, d.q, asked);
    HEADWISE_CHECK_CLOSE(f2.output, f1.output, 0.0);
    m.backward(f2, dy);
    for (const auto& [name, grad] : m.grad_dict()) {
        CAPTURE(name);
        HEADWISE_CHECK_CLOSE(grad, grads_ones.at(name), 0.0);
    }
    Tensor<double> expected(Shape{c.H});
    for (Index b = 0; b < c.B; ++b)
        for (Index h = 0; h < c.H; ++h) expected(h) += per_batch(b, h);
    HEADWISE_CHECK_CLOSE(summed, expected, 1e-14);
    m.backward(m.forward(d.q, d.q, d.q, asked), dy);  // accumulates
    for (Index h = 0; h < c.H; ++h)
        CHECK(summed(h) == Catch::Approx(2 * expected(h)).epsilon(1e-12));
    // The gradient of a head is d loss / d xi = sum(dG ⊙ ctx): with xi = 0 nothing reaches the
    // head's parameters, but its gate still gets a gradient.
    AttentionMasks<double> off = d.masks;
    off.head_mask = Tensor<double>(Shape{c.H}, std::vector<double>{1.0, 0.0, 1.0, 1.0});
    Tensor<double> dxi(Shape{c.H});
    off.head_mask_grad = dxi;
    m.zero_grad();
    m.backward(m.forward(d.q, d.q, d.q, off), dy);
    CHECK(dxi(1) == Catch::Approx(expected(1)).epsilon(1e-12));
    const auto grads = m.grad_dict();
    const Index D = c.E / c.H;
    for (Index r = 0; r < D; ++r)
        for (Index col = 0; col < c.E; ++col)
            CHECK(grads.at("in_proj_weight")(1 * D + r, col) == 0.0);  // W_1^Q
    // Eval mode ignores head_mask_grad.
    m.eval();
    dxi.matrix().setZero();
    CHECK_NOTHROW(m.forward(d.q, d.q, d.q, off));
    CHECK(dxi.matrix().isZero());
}

TEST_CASE("head_mask: decode in chunks equals a gated causal forward", "[mha][head_mask][decode]") {
    for (const bool batched_gates : {false, true})
        for (Projection p : kProjections) {
            CAPTURE(batched_gates, to_string(p));
            MultiheadAttentionOptions o;
            o.embed_dim = 6;
            o.num_heads = 4;
            o.num_kv_heads = 2;
            o.head_dim = 4;
            o.rotary.enabled = true;
            o.add_bias_kv = batched_gates;
            o.projection = p;
            MultiheadAttention<double> m(o, 42);
            test::randomize_parameters(m, 8);
            m.eval();
            std::mt19937_64 rng(5);
            const Index B = 2, L = 6;
            const Tensor<double> x = Tensor<double>::randn(Shape{B, L, 6}, rng);
            AttentionMasks<double> masks;
            masks.is_causal = true;
            masks.head_mask = Tensor<double>::randn(batched_gates ? Shape{B, 4} : Shape{4}, rng);
            const Tensor<double> expected = m.forward(x, x, x, masks).output;
            KVCache<double> cache = m.make_kv_cache(B, L);
            Tensor<double> got(Shape{B, L, 6});
            for (Index t0 = 0, chunk = 1; t0 < L; t0 += chunk, ++chunk) {
                const Index n = std::min(chunk, L - t0);
                Tensor<double> part(Shape{B, n, 6});
                for (Index b = 0; b < B; ++b)
                    for (Index t = 0; t < n; ++t)
                        for (Index e = 0; e < 6; ++e) part(b, t, e) = x(b, t0 + t, e);
                const Tensor<double> y = m.decode(part, cache, {}, masks.head_mask);
                for (Index b = 0; b < B; ++b)
                    for (Index t = 0; t < n; ++t)
                        for (Index e = 0; e < 6; ++e) got(b, t0 + t, e) = y(b, t, e);
            }
            HEADWISE_CHECK_CLOSE(got, expected, 1e-12);
        }
}

TEST_CASE("head_mask: shape errors", "[mha][head_mask][errors]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 4;
    MultiheadAttention<double> m(o, 1);
    const Tensor<double> x(Shape{2, 3, 8});
    AttentionMasks<double> masks;
    masks.head_mask = Tensor<double>(Shape{3});
    const std::string fn = "headwise::MultiheadAttention::forward: ";
    REQUIRE_THROWS_AS(m.forward(x, x, x, masks), shape_error);
    REQUIRE_THROWS_WITH(m.forward(x, x, x, masks),
                        fn + "masks.head_mask: expected shape [4] or [2, 4], got [3]");
    masks.head_mask = Tensor<double>(Shape{2, 4});
    Tensor<double> grad(Shape{4});
    masks.head_mask_grad = grad;
    REQUIRE_THROWS_WITH(m.forward(x, x, x, masks),
                        fn + "masks.head_mask_grad: expected shape [2, 4], got [4]");
    masks.head_mask = Tensor<double>();
    Tensor<double> wrong(Shape{4, 2});
    masks.head_mask_grad = wrong;
    REQUIRE_THROWS_WITH(m.forward(x, x, x, masks),
                        fn + "masks.head_mask_grad: expected shape [4] or [2, 4], got [4, 2]");
    m.eval();
    KVCache<double> cache = m.make_kv_cache(2, 4);
    const Tensor<double> gates(Shape{2, 3});
    REQUIRE_THROWS_WITH(m.decode(x, cache, {}, gates),
                        "headwise::MultiheadAttention::decode: head_mask: expected shape [4] or "
                        "[2, 4], got [2, 3]");
    CHECK(cache.size() == 0);
}

}  // namespace test_mha_head_mask
