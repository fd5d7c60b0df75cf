// SPDX-License-Identifier: MIT
// options.head_dim: an inner width H D other than embed_dim. Parameter shapes, forward against the
// reference loops in double on every projection and kernel, backward against central differences
// and across projections, decode against forward, and the option's errors.
#include <headwise/headwise.hpp>

#include <algorithm>  // std::max, std::min
#include <cmath>      // std::abs, std::sqrt
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/mha_random.hpp"
#include "support/projections.hpp"

namespace test_mha_head_dim {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::kProjections;
using headwise::test::MaskKind;
using headwise::test::MhaConfig;
using headwise::test::with;

namespace {

using C = MhaConfig&;

/// Inner widths wider and narrower than E, odd D, grouped and multi-query heads, kdim/vdim,
/// appended keys, every mask, rotary, unbatched.
std::vector<MhaConfig> grid() {
    return {
        with([](C c) { c.E = 6, c.H = 4, c.head_dim = 3; }),  // H D = 12 > E, odd D
        with([](C c) {
            c.E = 8, c.H = 2, c.head_dim = 2;  // H D = 4 < E
            c.masks = MaskKind::all, c.bias_kv = true, c.zero_attn = true;
        }),
        with([](C c) {
            c.E = 6, c.H = 4, c.Hkv = 2, c.head_dim = 4, c.inputs = Inputs::distinct, c.S = 4;
            c.kdim = 5, c.vdim = 3, c.masks = MaskKind::key_padding;
        }),
        with([](C c) {
            c.E = 5, c.H = 3, c.Hkv = 1, c.head_dim = 2, c.inputs = Inputs::kv_same, c.S = 5;
            c.masks = MaskKind::causal, c.alignment = CausalAlignment::bottom_right;
            c.rotary.enabled = true;
        }),
        with([](C c) {
            c.E = 6, c.H = 2, c.head_dim = 5, c.batched = false, c.masks = MaskKind::bias_4d;
            c.average = false, c.bias = false;
        }),
        with([](C c) {
            c.E = 4, c.H = 3, c.head_dim = 3, c.masks = MaskKind::bool_4d, c.scale = 0.7;
        }),
    };
}

MultiheadAttentionOptions options_for(const MhaConfig& c, Projection p, AttentionKernel kernel) {
    MultiheadAttentionOptions o = c.options(p);
    o.attention_kernel = kernel;
    o.attention_tiles = {2, 3};  // short sequences cross tiles
    return o;
}

/// The reference's per-head weights as the module returns them: [B, H, L, Sx], or averaged over
/// the heads [B, L, Sx] (the batch dimension dropped for an unbatched call).
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

/// gradcheck over every input and parameter of `c` on projection `p`.
GradcheckResult gradcheck_module(const MhaConfig& c, Projection p) {
    const test::MhaData<double> d = test::make_data<double>(c);
    const MultiheadAttention<double> init(c.options(p), 17);
    std::vector<std::string> names;
    std::vector<Tensor<double>> inputs{d.q};
    if (c.inputs != Inputs::self) inputs.push_back(d.k);
    if (c.inputs == Inputs::distinct) inputs.push_back(d.v);
    const std::size_t n_args = inputs.size();
    std::mt19937_64 prng(5);
    for (const auto& [name, t] : init.state_dict()) {
        names.push_back(name);
        inputs.push_back(
            name.find("bias") != std::string::npos ? Tensor<double>::randn(t.shape(), prng) : t);
    }
    const auto run = [=](const std::vector<Tensor<double>>& x, MultiheadAttention<double>& m) {
        StateDict<double> sd;
        for (std::size_t i = 0; i < names.size(); ++i) sd[names[i]] = x[n_args + i];
        m.load_state_dict(sd);
        const Tensor<double>& k = n_args > 1 ? x[1] : x[0];
        return m.forward(x[0], k, n_args > 2 ? x[2] : k, d.masks);
    };
    const auto f = [=](const std::vector<Tensor<double>>& x) {
        MultiheadAttention<double> m(c.options(p), 99);
        return run(x, m).output;
    };
    const auto back = [=](const std::vector<Tensor<double>>& x, const Tensor<double>& dy) {
        MultiheadAttention<double> m(c.options(p), 99);
        AttentionBackwardOptions bo;
        bo.combine_self = true;
        const AttentionGradients<double> g = m.backward(run(x, m), dy, bo);
        std::vector<Tensor<double>> out;
        if (n_args == 1) {
            out.push_back(g.input);
        } else if (n_args == 2) {
            Tensor<double> s = g.key;
            for (Index i = 0; i < s.numel(); ++i) s.data()[i] += g.value.data()[i];
            out.insert(out.end(), {g.query, s});
        } else {
            out.insert(out.end(), {g.query, g.key, g.value});
        }
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

TEST_CASE("head_dim sets the parameter shapes: in_proj [H D + 2 Hkv D, E], out_proj [E, H D]",
          "[mha][head_dim]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 6;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.head_dim = 5;
    const MultiheadAttention<double> packed(o, 1);
    CHECK(packed.head_dim() == 5);
    CHECK(packed.inner_dim() == 20);
    const auto sd = packed.state_dict();
    CHECK(sd.at("in_proj_weight").shape() == Shape{20 + 2 * 10, 6});
    CHECK(sd.at("in_proj_bias").shape() == Shape{40});
    CHECK(sd.at("out_proj.weight").shape() == Shape{6, 20});
    CHECK(sd.at("out_proj.bias").shape() == Shape{6});
    CHECK(packed.head(3).q_weight().shape() == Shape{5, 6});
    o.kdim = 3;
    o.vdim = 7;
    o.add_bias_kv = true;
    const MultiheadAttention<double> separate(o, 1);
    const auto sd2 = separate.state_dict();
    CHECK(sd2.at("q_proj_weight").shape() == Shape{20, 6});
    CHECK(sd2.at("k_proj_weight").shape() == Shape{10, 3});
    CHECK(sd2.at("v_proj_weight").shape() == Shape{10, 7});
    CHECK(sd2.at("bias_k").shape() == Shape{1, 1, 10});
    CHECK(sd2.at("out_proj.weight").shape() == Shape{6, 20});
    // torch's initialisation of out_proj as a Linear(H D, E): kaiming_uniform(a = sqrt 5) has
    // bound 1 / sqrt(fan_in) = 1 / sqrt(H D).
    double largest = 0;
    for (double w : sd2.at("out_proj.weight")) largest = std::max(largest, std::abs(w));
    CHECK(largest <= 1.0 / std::sqrt(20.0));
    CHECK(largest > 0.5 / std::sqrt(20.0));
    // head_dim = E / H is the default exactly: same parameters from the same seed.
    MultiheadAttentionOptions plain;
    plain.embed_dim = 8;
    plain.num_heads = 2;
    MultiheadAttentionOptions same = plain;
    same.head_dim = 4;
    const auto a = MultiheadAttention<double>(plain, 3).state_dict();
    const auto b = MultiheadAttention<double>(same, 3).state_dict();
    for (const auto& [name, t] : a) {
        CAPTURE(name);
        HEADWISE_CHECK_CLOSE(t, b.at(name), 0.0);
    }
}

TEST_CASE("head_dim: forward equals the reference loops on every projection and kernel",
          "[mha][head_dim]") {
    for (const MhaConfig& c : grid())
        for (Projection p : kProjections)
            for (AttentionKernel kernel :
                 {AttentionKernel::materialised, AttentionKernel::blocked}) {
                CAPTURE(c.str(), to_string(p), to_string(kernel));
                MultiheadAttention<double> m(options_for(c, p, kernel), 42);
                test::randomize_parameters(m, 8);
                const test::MhaData<double> d = test::make_data<double>(c);
                const test::ReferenceAttention r = test::run_reference(c, m, d);
                for (bool training : {true, false}) {
                    if (training)
                        m.train();
                    else
                        m.eval();
                    const auto f = m.forward(d.q, d.key(), d.value(), d.masks);
                    HEADWISE_CHECK_CLOSE(f.output, Tensor<double>(f.output.shape(), r.output),
                                         1e-12);
                    HEADWISE_CHECK_CLOSE(f.attn_weights, expected_weights(c, r), 1e-12);
                }
            }
    // In float too, within float's rounding.
    const MhaConfig c = grid()[2];
    MultiheadAttention<float> m(c.options(Projection::fused), 42);
    test::randomize_parameters(m, 8);
    const test::MhaData<float> d = test::make_data<float>(c);
    const test::ReferenceAttention r = test::run_reference(c, m, d);
    const auto f = m.forward(d.q, d.key(), d.value(), d.masks);
    HEADWISE_CHECK_CLOSE(
        f.output,
        Tensor<float>(f.output.shape(), std::vector<float>(r.output.begin(), r.output.end())),
        1e-5);
}

TEST_CASE("head_dim: gradients match finite differences", "[mha][head_dim][gradcheck]") {
    for (const MhaConfig& c : grid())
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            const GradcheckResult r = gradcheck_module(c, p);
            INFO("worst: " << r.where << " (relative " << r.max_rel_error << ", " << r.checked
                           << " partials)");
            CHECK(r.checked > 100);
            CHECK(r.max_rel_error <= 1e-6);
        }
}

TEST_CASE("head_dim: every projection and kernel gives the same outputs and gradients",
          "[mha][head_dim]") {
    for (const MhaConfig& c : grid()) {
        CAPTURE(c.str());
        const test::MhaData<double> d = test::make_data<double>(c);
        std::mt19937_64 rng(12);
        MultiheadAttention<double> first(c.options(Projection::fused), 42);
        test::randomize_parameters(first, 8);
        const auto sd = first.state_dict();
        const auto f0 = first.forward(d.q, d.key(), d.value(), d.masks);
        const Tensor<double> dy = Tensor<double>::randn(f0.output.shape(), rng);
        const auto g0 = first.backward(f0, dy);
        const auto grads0 = first.grad_dict();
        for (Projection p : kProjections)
            for (AttentionKernel kernel :
                 {AttentionKernel::materialised, AttentionKernel::blocked}) {
                CAPTURE(to_string(p), to_string(kernel));
                MultiheadAttention<double> m(options_for(c, p, kernel), 1);
                m.load_state_dict(sd);
                const auto f = m.forward(d.q, d.key(), d.value(), d.masks);
                HEADWISE_CHECK_CLOSE(f.output, f0.output, 1e-13);
                const auto g = m.backward(f, dy);
                HEADWISE_CHECK_CLOSE(g.query, g0.query, 1e-12);
                HEADWISE_CHECK_CLOSE(g.key, g0.key, 1e-12);
                HEADWISE_CHECK_CLOSE(g.value, g0.value, 1e-12);
                for (const auto& [name, grad] : m.grad_dict()) {
                    CAPTURE(name);
                    HEADWISE_CHECK_CLOSE(grad, grads0.at(name), 1e-12);
                }
            }
    }
}

TEST_CASE("head_dim: decode in chunks equals a causal forward", "[mha][head_dim][decode]") {
    using C2 = MhaConfig&;
    const std::vector<MhaConfig> configs = {
        with([](C2 c) { c.E = 6, c.H = 4, c.head_dim = 3; }),
        with([](C2 c) { c.E = 6, c.H = 4, c.Hkv = 2, c.head_dim = 4, c.rotary.enabled = true; }),
        with([](C2 c) { c.E = 8, c.H = 2, c.Hkv = 1, c.head_dim = 2, c.bias_kv = true; }),
    };
    for (const MhaConfig& c : configs)
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            MultiheadAttention<double> m(c.options(p), 42);
            test::randomize_parameters(m, 8);
            m.eval();
            std::mt19937_64 rng(5);
            const Index B = 2, L = 7;
            const Tensor<double> x = Tensor<double>::randn(Shape{B, L, c.E}, rng);
            AttentionMasks<double> causal;
            causal.is_causal = true;
            const Tensor<double> expected = m.forward(x, x, x, causal).output;
            KVCache<double> cache = m.make_kv_cache(B, L);
            Tensor<double> got(Shape{B, L, c.E});
            for (Index t0 = 0, chunk = 1; t0 < L; t0 += chunk, ++chunk) {
                const Index n = std::min(chunk, L - t0);
                Tensor<double> part(Shape{B, n, c.E});
                for (Index b = 0; b < B; ++b)
                    for (Index t = 0; t < n; ++t)
                        for (Index e = 0; e < c.E; ++e) part(b, t, e) = x(b, t0 + t, e);
                const Tensor<double> y = m.decode(part, cache);
                for (Index b = 0; b < B; ++b)
                    for (Index t = 0; t < n; ++t)
                        for (Index e = 0; e < c.E; ++e) got(b, t0 + t, e) = y(b, t, e);
            }
            HEADWISE_CHECK_CLOSE(got, expected, 1e-12);
        }
}

TEST_CASE("head_dim: the option's errors", "[mha][head_dim][errors]") {
    const std::string fn = "headwise::MultiheadAttention::MultiheadAttention: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 5;
    o.num_heads = 3;
    REQUIRE_THROWS_AS(MultiheadAttention<double>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<double>(o),
                        fn + "options.num_heads: must divide embed_dim = 5, got 3");
    o.head_dim = 2;  // then num_heads need not divide embed_dim
    CHECK_NOTHROW(MultiheadAttention<double>(o));
    o.head_dim = -1;
    REQUIRE_THROWS_AS(MultiheadAttention<double>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<double>(o),
                        fn + "options.head_dim: must be positive, or 0 for embed_dim / "
                             "num_heads, got -1");
    o.head_dim = 3;
    o.rotary.enabled = true;
    REQUIRE_THROWS_WITH(MultiheadAttention<double>(o),
                        fn + "options.rotary.enabled: needs an even head dimension D (head_dim, "
                             "or embed_dim / num_heads when it is 0; RoPE rotates pairs of "
                             "features), got D = 3");
    o.rotary.enabled = false;
    o.head_dim = Index(1) << 60;
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        fn + "options: num_heads = 3, head_dim = 1152921504606846976, embed_dim = "
                             "5: the weights [num_heads head_dim, embed_dim] overflow the address "
                             "space");
    // A forward's query has E features; backward names a module of another head_dim.
    o.head_dim = 2;
    MultiheadAttention<double> m(o, 1);
    const Tensor<double> x(Shape{1, 2, 6});
    REQUIRE_THROWS_WITH(m.forward(x, x, x),
                        "headwise::MultiheadAttention::forward: query: expected shape [B, L, 5], "
                        "got [1, 2, 6]");
}

}  // namespace test_mha_head_dim
