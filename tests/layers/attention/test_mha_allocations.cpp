// SPDX-License-Identifier: MIT
// MultiheadAttention reuses its buffers: allocations of steady-state calls, counted by operator
// new.
#include <headwise/layers/attention/multihead_attention.hpp>

#include "support/allocation_counter.hpp"
#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/projections.hpp"

using namespace headwise;
using headwise::test::kProjections;
using test::count_allocations;
using test::Inputs;
using test::MaskKind;
using test::MhaConfig;

namespace {

const MhaConfig kConfigs[] = {
    test::with([](MhaConfig& c) { c.need_weights = false; }),
    test::with([](MhaConfig& c) {
        c.inputs = Inputs::kv_same;
        c.S = 5;
        c.masks = MaskKind::all;
        c.need_weights = false;
    }),
    test::with([](MhaConfig& c) {
        c.inputs = Inputs::distinct;
        c.S = 4;
        c.kdim = 5;
        c.vdim = 3;
        c.bias_kv = true;
        c.zero_attn = true;
        c.need_weights = false;
    }),
};

}  // namespace

TEMPLATE_TEST_CASE("an eval forward allocates nothing but its result in steady state",
                   "[mha][alloc]", float, double) {
    using T = TestType;
    const MhaConfig c = GENERATE(from_range(std::begin(kConfigs), std::end(kConfigs)));
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(c.str(), to_string(p));
    const test::MhaData<T> d = test::make_data<T>(c);
    MultiheadAttention<T> m(c.options(p), 3);
    m.eval();
    auto call = [&] { return m.forward(d.q, d.key(), d.value(), d.masks); };
    const Tensor<T> first = call().output;  // sizes the module's buffers
    SECTION("the output only") {
        AttentionForward<T> again;
        CHECK(count_allocations([&] { again = call(); }) == 1);
        CHECK(test::identical(again.output, first));  // the reused buffers give the same result
    }
    SECTION("the output and the averaged weights") {
        test::MhaData<T> dw = d;
        dw.masks.need_weights = true;
        auto call_w = [&] { return m.forward(dw.q, dw.key(), dw.value(), dw.masks); };
        const AttentionForward<T> warm = call_w();  // grows P to [B, H, L, S']
        AttentionForward<T> again;
        CHECK(count_allocations([&] { again = call_w(); }) == 2);
        CHECK(test::identical(again.output, warm.output));
        CHECK(test::identical(again.attn_weights, warm.attn_weights));
    }
}

TEMPLATE_TEST_CASE("a training step reuses the saved activations of the step before",
                   "[mha][alloc]", float, double) {
    using T = TestType;
    const MhaConfig c = GENERATE(from_range(std::begin(kConfigs), std::end(kConfigs)));
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(c.str(), to_string(p));
    const test::MhaData<T> d = test::make_data<T>(c);
    MultiheadAttention<T> m(c.options(p), 3);
    const Tensor<T> dy = Tensor<T>::ones(d.q.shape());
    auto step = [&] {
        const AttentionForward<T> fwd = m.forward(d.q, d.key(), d.value(), d.masks);
        return m.backward(fwd, dy);
    };  // fwd, and with it the saved activations, is gone when step returns
    const AttentionGradients<T> first = step();
    m.zero_grad();
    AttentionForward<T> fwd;
    // The output and the saved state's control block; P, the projections, ctx and the input
    // copies come back from the step before.
    CHECK(count_allocations([&] { fwd = m.forward(d.q, d.key(), d.value(), d.masks); }) == 2);
    // The three input gradients.
    AttentionGradients<T> again;
    CHECK(count_allocations([&] { again = m.backward(fwd, dy); }) == 3);
    CHECK(test::identical(again.query, first.query));
    CHECK(test::identical(again.key, first.key));
    CHECK(test::identical(again.value, first.value));
}

TEST_CASE("saved activations outlive their module", "[mha][alloc]") {
    const MhaConfig c;
    const test::MhaData<double> d = test::make_data<double>(c);
    AttentionForward<double> fwd;
    {
        MultiheadAttention<double> m(c.options(Projection::fused), 3);
        fwd = m.forward(d.q, d.q, d.q, d.masks);
    }
    REQUIRE(fwd.differentiable());
    fwd = AttentionForward<double>();  // nothing to hand back to: frees them
    CHECK_FALSE(fwd.differentiable());
}
