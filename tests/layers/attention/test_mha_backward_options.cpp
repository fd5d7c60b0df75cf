// SPDX-License-Identifier: MIT
// MultiheadAttention's backward options (input gradients only where asked, the self-attention
// gradient once) and training inputs referenced instead of copied: the same gradients as the
// default path, which the reference-loop and gradcheck tests establish.
#include <random>  // std::mt19937_64
#include <string>  // std::string

#include <headwise/layers/attention/multihead_attention.hpp>

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/projections.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_mha_backward_options {

using namespace headwise;
namespace reference = headwise::test::reference;
using headwise::test::kProjections;
using headwise::test::Tol;

namespace {

template <class T>
Tensor<T> upstream(const Shape& shape) {
    std::mt19937_64 rng(11);
    return Tensor<T>::randn(shape, rng);
}

/// Checks that every parameter gradient of `a` equals `b`'s exactly.
template <class T>
void check_same_parameter_gradients(const MultiheadAttention<T>& a,
                                    const MultiheadAttention<T>& b) {
    const auto ga = a.grad_dict();
    const auto gb = b.grad_dict();
    REQUIRE(ga.size() == gb.size());
    for (const auto& [name, g] : ga) {
        INFO("parameter gradient " << name);
        CHECK(test::identical(g, gb.at(name)));
    }
}

const test::MhaConfig kConfigs[] = {
    test::with([](test::MhaConfig&) {}),
    test::with([](test::MhaConfig& c) {
        c.inputs = test::Inputs::kv_same;
        c.S = 4;
        c.masks = test::MaskKind::all;
    }),
    test::with([](test::MhaConfig& c) {
        c.inputs = test::Inputs::distinct;
        c.S = 5;
        c.kdim = 6;
        c.vdim = 3;
        c.bias_kv = true;
        c.zero_attn = true;
    }),
    test::with([](test::MhaConfig& c) {
        c.masks = test::MaskKind::causal;
        c.bias_kv = true;
        c.L = 4;
    }),
};

}  // namespace

TEMPLATE_TEST_CASE("backward computes the input gradients asked for and no others",
                   "[mha][backward]", float, double) {
    using T = TestType;
    const int config = GENERATE(0, 1, 2, 3);
    const Projection p = GENERATE(from_range(kProjections));
    const auto [query, key, value] = GENERATE(table<bool, bool, bool>({{true, false, false},
                                                                       {false, true, false},
                                                                       {false, false, true},
                                                                       {true, false, true},
                                                                       {false, true, true},
                                                                       {false, false, false}}));
    const test::MhaConfig& c = kConfigs[config];
    CAPTURE(c.str(), to_string(p), query, key, value);
    const test::MhaData<T> d = test::make_data<T>(c);

    MultiheadAttention<T> all(c.options(p), 3), some(c.options(p), 3);
    const auto fa = all.forward(d.q, d.key(), d.value(), d.masks);
    const auto fs = some.forward(d.q, d.key(), d.value(), d.masks);
    const Tensor<T> dy = upstream<T>(fa.output.shape());
    const AttentionGradients<T> ga = all.backward(fa, dy);
    AttentionBackwardOptions options;
    options.query = query;
    options.key = key;
    options.value = value;
    const AttentionGradients<T> gs = some.backward(fs, dy, options);

    // Asked for: what the full backward gives, bit for bit (the same products in the same
    // order); not asked for: empty. The parameter gradients never depend on the choice.
    if (query) CHECK(test::identical(gs.query, ga.query));
    if (key) CHECK(test::identical(gs.key, ga.key));
    if (value) CHECK(test::identical(gs.value, ga.value));
    CHECK(gs.query.empty() != query);
    CHECK(gs.key.empty() != key);
    CHECK(gs.value.empty() != value);
    CHECK(gs.input.empty());
    check_same_parameter_gradients(some, all);
}

TEMPLATE_TEST_CASE("the self-attention gradient comes once, the sum of the three",
                   "[mha][backward]", float, double) {
    using T = TestType;
    const int config = GENERATE(0, 3);  // the self-attention configurations
    const Projection p = GENERATE(from_range(kProjections));
    const test::MhaConfig& c = kConfigs[config];
    CAPTURE(c.str(), to_string(p));
    const test::MhaData<T> d = test::make_data<T>(c);

    MultiheadAttention<T> apart(c.options(p), 3), once(c.options(p), 3);
    const auto fa = apart.forward(d.q, d.q, d.q, d.masks);
    const auto fo = once.forward(d.q, d.q, d.q, d.masks);
    const Tensor<T> dy = upstream<T>(fa.output.shape());
    const AttentionGradients<T> ga = apart.backward(fa, dy);
    AttentionBackwardOptions options;
    options.combine_self = true;
    const AttentionGradients<T> go = once.backward(fo, dy, options);

    Tensor<T> sum(ga.query.shape());  // [B, L, E]
    for (Index i = 0; i < sum.numel(); ++i)
        sum.data()[i] = ga.query.data()[i] + ga.key.data()[i] + ga.value.data()[i];
    REQUIRE(go.input.shape() == d.q.shape());
    HEADWISE_CHECK_CLOSE(go.input, reference::to_double<T>(sum), Tol<T>::rel);
    CHECK(go.query.empty());
    CHECK(go.key.empty());
    CHECK(go.value.empty());
    check_same_parameter_gradients(once, apart);
}

TEMPLATE_TEST_CASE("combine_self leaves the per-argument form when the call is not self-attention",
                   "[mha][backward]", float, double) {
    using T = TestType;
    const int config = GENERATE(1, 2);
    const Projection p = GENERATE(Projection::fused, Projection::per_head);
    const test::MhaConfig& c = kConfigs[config];
    CAPTURE(c.str(), to_string(p));
    const test::MhaData<T> d = test::make_data<T>(c);
    MultiheadAttention<T> a(c.options(p), 3), b(c.options(p), 3);
    const auto fa = a.forward(d.q, d.key(), d.value(), d.masks);
    const auto fb = b.forward(d.q, d.key(), d.value(), d.masks);
    const Tensor<T> dy = upstream<T>(fa.output.shape());
    AttentionBackwardOptions options;
    options.combine_self = true;
    const AttentionGradients<T> ga = a.backward(fa, dy);
    const AttentionGradients<T> gb = b.backward(fb, dy, options);
    CHECK(gb.input.empty());
    CHECK(test::identical(gb.query, ga.query));
    CHECK(test::identical(gb.key, ga.key));
    CHECK(test::identical(gb.value, ga.value));
}

TEMPLATE_TEST_CASE("training inputs referenced instead of copied give the same results",
                   "[mha][backward]", float, double) {
    using T = TestType;
    const int config = GENERATE(0, 1, 2, 3);
    const Projection p = GENERATE(from_range(kProjections));
    const test::MhaConfig& c = kConfigs[config];
    CAPTURE(c.str(), to_string(p));
    const test::MhaData<T> d = test::make_data<T>(c);
    MultiheadAttentionOptions referencing = c.options(p);
    referencing.reference_inputs = true;
    MultiheadAttention<T> copied(c.options(p), 3), referenced(referencing, 3);
    const auto fc = copied.forward(d.q, d.key(), d.value(), d.masks);
    const auto fr = referenced.forward(d.q, d.key(), d.value(), d.masks);
    CHECK(test::identical(fr.output, fc.output));
    const Tensor<T> dy = upstream<T>(fc.output.shape());
    const AttentionGradients<T> gc = copied.backward(fc, dy);
    const AttentionGradients<T> gr = referenced.backward(fr, dy);
    CHECK(test::identical(gr.query, gc.query));
    CHECK(test::identical(gr.key, gc.key));
    CHECK(test::identical(gr.value, gc.value));
    check_same_parameter_gradients(referenced, copied);
}

TEST_CASE("a referenced input read by backward is the caller's tensor as it is then",
          "[mha][backward]") {
    // The lifetime rule of reference_inputs, shown: backward's weight gradients use the caller's
    // query as it is when backward runs, so changing it in between changes them (and a copying
    // module does not see the change).
    const test::MhaConfig c = test::with([](test::MhaConfig&) {});
    test::MhaData<double> d = test::make_data<double>(c);
    MultiheadAttentionOptions referencing = c.options(Projection::fused);
    referencing.reference_inputs = true;
    MultiheadAttention<double> copied(c.options(Projection::fused), 3), referenced(referencing, 3);
    const auto fc = copied.forward(d.q, d.q, d.q);
    const auto fr = referenced.forward(d.q, d.q, d.q);
    const Tensor<double> dy = upstream<double>(fc.output.shape());
    for (double& x : d.q) x *= 2;
    copied.backward(fc, dy);
    referenced.backward(fr, dy);
    CHECK_FALSE(test::identical(referenced.grad_dict().at("in_proj_weight"),
                                copied.grad_dict().at("in_proj_weight")));
    CHECK(test::identical(referenced.grad_dict().at("out_proj.weight"),
                          copied.grad_dict().at("out_proj.weight")));
}

}  // namespace test_mha_backward_options
