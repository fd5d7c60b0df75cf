// SPDX-License-Identifier: MIT
// MultiheadAttention backward against central finite differences in double: every input and
// every parameter, with masks, appended keys and dropout.
#include <headwise/headwise.hpp>

#include <string>  // std::string
#include <vector>  // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/mha_case.hpp"
#include "support/projections.hpp"

namespace test_mha_gradcheck {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::kProjections;
using headwise::test::MaskKind;
using headwise::test::MhaConfig;
using headwise::test::with;

namespace {

/// gradcheck of one configuration: inputs [query, (key), (value), parameters...].
GradcheckResult check_module(const MhaConfig& c, Projection p) {
    const test::MhaData<double> d = test::make_data<double>(c);
    const MultiheadAttention<double> init(c.options(p), 17);
    const auto sd0 = init.state_dict();
    std::vector<std::string> names;
    std::vector<Tensor<double>> inputs{d.q};
    if (c.inputs != Inputs::self) inputs.push_back(d.k);
    if (c.inputs == Inputs::distinct) inputs.push_back(d.v);
    const std::size_t n_args = inputs.size();
    std::mt19937_64 prng(5);
    for (const auto& [name, t] : sd0) {
        names.push_back(name);
        // Non-zero biases, so their gradients flow through a generic point.
        inputs.push_back(
            name.find("bias") != std::string::npos ? Tensor<double>::randn(t.shape(), prng) : t);
    }
    // A fresh module per evaluation: same seed, so the same dropout mask every time.
    auto forward = [=](const std::vector<Tensor<double>>& x, MultiheadAttention<double>& m) {
        MultiheadAttention<double>::StateDict sd;
        for (std::size_t i = 0; i < names.size(); ++i) sd[names[i]] = x[n_args + i];
        m.load_state_dict(sd);
        const Tensor<double>& q = x[0];
        const Tensor<double>& k = n_args > 1 ? x[1] : x[0];
        const Tensor<double>& v = n_args > 2 ? x[2] : k;
        return m.forward(q, k, v, d.masks);
    };
    const auto f = [=](const std::vector<Tensor<double>>& x) {
        MultiheadAttention<double> m(c.options(p), 99);
        return forward(x, m).output;
    };
    const auto back = [=](const std::vector<Tensor<double>>& x, const Tensor<double>& dy) {
        MultiheadAttention<double> m(c.options(p), 99);
        const auto fwd = forward(x, m);
        const AttentionGradients<double> g = m.backward(fwd, dy);
        std::vector<Tensor<double>> out;
        if (n_args == 1) {  // one tensor as query, key and value: the sum of the three
            Tensor<double> s = g.query;
            for (Index i = 0; i < s.numel(); ++i)
                s.data()[i] += g.key.data()[i] + g.value.data()[i];
            out.push_back(std::move(s));
        } else if (n_args == 2) {  // key is value
            out.push_back(g.query);
            Tensor<double> s = g.key;
            for (Index i = 0; i < s.numel(); ++i) s.data()[i] += g.value.data()[i];
            out.push_back(std::move(s));
        } else {
            out.insert(out.end(), {g.query, g.key, g.value});
        }
        const auto grads = m.grad_dict();
        for (const std::string& name : names) out.push_back(grads.at(name));
        return out;
    };
    std::mt19937_64 rng(3);
    // Central differences err by O(eps^2) (truncation) plus O(u / eps) (rounding, u = 1.1e-16
    // times the size of the loss): eps = 1e-5 balances the two for this O(1) loss; the default
    // 1e-6 leaves rounding noise of a few 1e-7 on the smallest partials.
    GradcheckOptions options;
    options.eps = 1e-5;
    return gradcheck(f, back, inputs, rng, options);
}

}  // namespace

TEST_CASE("MultiheadAttention gradients match finite differences", "[mha][gradcheck]") {
    using C = MhaConfig&;
    const std::vector<MhaConfig> grid = {
        MhaConfig{},
        with([](C c) { c.masks = MaskKind::all, c.bias_kv = true, c.zero_attn = true; }),
        with([](C c) {
            c.inputs = Inputs::distinct, c.S = 4, c.kdim = 5, c.vdim = 3;
            c.masks = MaskKind::key_padding;
        }),
        with([](C c) { c.inputs = Inputs::kv_same, c.S = 4, c.masks = MaskKind::bias_4d; }),
        with([](C c) { c.masks = MaskKind::causal, c.dropout = 0.3; }),
        with([](C c) {
            c.inputs = Inputs::distinct, c.S = 2, c.masks = MaskKind::bool_4d;
            c.dropout = 0.2, c.bias_kv = true;
        }),
        with([](C c) { c.bias = false, c.H = 4, c.batched = false; }),
        with([](C c) {
            c.inputs = Inputs::kv_same, c.L = 3, c.S = 5, c.masks = MaskKind::causal;
            c.alignment = CausalAlignment::bottom_right, c.scale = 0.9;
        }),
        with([](C c) {
            c.H = 4, c.Hkv = 2, c.masks = MaskKind::all, c.bias_kv = true, c.zero_attn = true;
        }),
        with([](C c) {
            c.H = 4, c.Hkv = 1, c.inputs = Inputs::distinct, c.S = 4, c.kdim = 5, c.vdim = 3;
            c.dropout = 0.2;
        }),
    };
    for (const MhaConfig& cfg : grid) {
        for (Projection p : kProjections) {
            CAPTURE(cfg.str(), to_string(p));
            const GradcheckResult r = check_module(cfg, p);
            INFO("worst: " << r.where << " (relative " << r.max_rel_error << ", " << r.checked
                           << " partials)");
            CHECK(r.checked > 100);
            CHECK(r.max_rel_error <= 1e-6);
        }
    }
}

TEST_CASE("a fully masked row has zero gradients, and finite differences agree",
          "[mha][gradcheck]") {
    MhaConfig c;
    c.inputs = Inputs::distinct;
    c.S = 3;
    c.masks = MaskKind::key_padding;
    test::MhaData<double> d = test::make_data<double>(c);
    // Batch 1 pads every key: its queries see nothing.
    for (Index j = 0; j < c.S; ++j) d.masks.key_padding_mask(1, j) = true;
    const MultiheadAttention<double> init(c.options(Projection::fused), 17);
    const auto sd = init.state_dict();
    const auto f = [=](const std::vector<Tensor<double>>& x) {
        MultiheadAttention<double> m(c.options(Projection::fused), 1);
        m.load_state_dict(sd);
        return m.forward(x[0], x[1], x[2], d.masks).output;
    };
    const auto back = [=](const std::vector<Tensor<double>>& x, const Tensor<double>& dy) {
        MultiheadAttention<double> m(c.options(Projection::fused), 1);
        m.load_state_dict(sd);
        const auto g = m.backward(m.forward(x[0], x[1], x[2], d.masks), dy);
        return std::vector<Tensor<double>>{g.query, g.key, g.value};
    };
    std::mt19937_64 rng(4);
    const GradcheckResult r = gradcheck(f, back, {d.q, d.k, d.v}, rng);
    INFO(r.where);
    CHECK(r.max_rel_error <= 1e-6);
    CHECK(r.checked == d.q.numel() + d.k.numel() + d.v.numel());
}

}  // namespace test_mha_gradcheck
