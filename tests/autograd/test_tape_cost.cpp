// SPDX-License-Identifier: MIT
// What a Tape in no-grad mode costs over the plain forward: one small allocation per call.
#include <headwise/autograd/functions.hpp>
#include <headwise/autograd/tape.hpp>

#include "support/allocation_counter.hpp"
#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"

using headwise::Shape;
using headwise::Tensor;
using headwise::autograd::Tape;
using headwise::autograd::Var;

TEST_CASE("tape: a no-grad forward allocates only one holder per call beyond the plain forward") {
    headwise::Generator rng(1);
    headwise::Linear<float> lin1(8, 16, true, rng), lin2(16, 8, true, rng);
    headwise::GELU<float> gelu;
    headwise::LayerNorm<float> norm(16);
    const Tensor<float> x0 = Tensor<float>::randn(Shape{4, 8}, rng);

    Tensor<float> plain;
    const long by_modules = headwise::test::count_allocations(
        [&] { plain = lin2.forward(norm.forward(gelu.forward(lin1.forward(x0)))); });

    Tape<float> tape(Tape<float>::no_grad);
    Tensor<float> x1 = x0;  // copied outside the count: input() takes it without a copy
    Var<float> y;
    const long by_tape = headwise::test::count_allocations([&] {
        namespace ag = headwise::autograd;
        const Var<float> x = tape.input(std::move(x1));
        y = ag::apply(lin2, ag::apply(norm, ag::apply(gelu, ag::apply(lin1, x))));
    });
    CHECK(headwise::test::identical<float>(y.value(), plain));
    CHECK(tape.size() == 0);
    // input() and the four calls: at most one shared holder each, nothing recorded. At most: a
    // compiler may omit or merge the allocations of new-expressions ([expr.new]), and clang's
    // sanitized -O1 build makes one fewer here than g++'s.
    CAPTURE(by_modules, by_tape);
    CHECK(by_tape - by_modules <= 5);
    CHECK(by_tape - by_modules >= 4);
}
