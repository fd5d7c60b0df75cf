// SPDX-License-Identifier: MIT
// Per-head parameter views of MultiheadAttention: writable on a module, read-only on a const one.
#include <algorithm>    // std::copy
#include <type_traits>  // std::is_same_v
#include <utility>      // std::declval

#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/random.hpp>

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/tolerance.hpp"

namespace test_mha_heads {

using namespace headwise;
using headwise::test::Tol;

static_assert(std::is_same_v<decltype(std::declval<MultiheadAttention<float>&>().head(0)),
                             HeadParameters<float>>,
              "a module's head views are writable");
static_assert(std::is_same_v<decltype(std::declval<const MultiheadAttention<float>&>().head(0)),
                             HeadParameters<const float>>,
              "a const module's head views are read-only");
static_assert(std::is_same_v<decltype(std::declval<HeadParameters<const float>&>().q_weight()),
                             TensorView<const float>>,
              "read-only views");

TEMPLATE_TEST_CASE("writing per-head weights through head(i) fills the packed parameters",
                   "[mha][heads]", float, double) {
    using T = TestType;
    const test::MhaConfig c = test::with([](test::MhaConfig& cfg) {
        cfg.E = 6;
        cfg.H = 3;
        cfg.kdim = 5;
        cfg.vdim = 4;
        cfg.S = 4;
        cfg.inputs = test::Inputs::distinct;
    });
    const Index D = 2;
    MultiheadAttention<T> source(c.options(Projection::fused), 1);
    source.load_state_dict([&] {  // non-zero biases, so that misplaced ones show
        StateDict<T> sd = source.state_dict();
        Generator rng(5);
        for (T& x : sd.at("in_proj_bias")) x = static_cast<T>(normal(rng));
        return sd;
    }());

    // Per-head weights as one small Linear per head keeps them: W_i [D, in], b_i [D].
    MultiheadAttention<T> target(c.options(Projection::per_head), 2);
    const MultiheadAttention<T>& read_only = source;
    for (Index h = 0; h < c.H; ++h) {
        const HeadParameters<const T> from = read_only.head(h);
        const HeadParameters<T> to = target.head(h);
        REQUIRE(to.k_weight().shape() == Shape{D, 5});
        std::copy(from.q_weight().begin(), from.q_weight().end(), to.q_weight().begin());
        std::copy(from.k_weight().begin(), from.k_weight().end(), to.k_weight().begin());
        std::copy(from.v_weight().begin(), from.v_weight().end(), to.v_weight().begin());
        std::copy(from.q_bias().begin(), from.q_bias().end(), to.q_bias().begin());
        std::copy(from.k_bias().begin(), from.k_bias().end(), to.k_bias().begin());
        std::copy(from.v_bias().begin(), from.v_bias().end(), to.v_bias().begin());
    }
    const StateDict<T> expected = source.state_dict(), got = target.state_dict();
    for (const char* name : {"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias"}) {
        CAPTURE(name);
        CHECK(test::identical(got.at(name), expected.at(name)));
    }

    // With the output projection copied too, both modules compute the same.
    target.load_state_dict(expected);
    const test::MhaData<T> d = test::make_data<T>(c);
    HEADWISE_CHECK_CLOSE(target.forward(d.q, d.k, d.v).output, source.forward(d.q, d.k, d.v).output,
                         Tol<T>::rel);

    // Gradient views land in the packed gradients.
    target.head(1).v_bias_grad()(0) = T(3);
    CHECK(target.grad_dict().at("in_proj_bias")(2 * c.E + 1 * D) == T(3));
}

}  // namespace test_mha_heads
