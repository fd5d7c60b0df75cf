// SPDX-License-Identifier: MIT
// Tests of headwise/autograd/sequential.hpp: names, modes and gradients of Sequential and Residual.
#include <headwise/autograd/sequential.hpp>

#include <string>  // std::string
#include <vector>  // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"

namespace test_sequential {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::autograd::Residual;
using headwise::autograd::Sequential;
using headwise::autograd::Tape;
using headwise::autograd::Var;
using headwise::test::identical;

namespace {

template <class T>
auto make_mlp(headwise::Generator& rng) {
    return Sequential(
        headwise::Linear<T>(4, 6, true, rng), headwise::GELU<T>(),
        Residual(Sequential(headwise::Linear<T>(6, 6, true, rng), headwise::Dropout<T>(0.5, 9))),
        headwise::LayerNorm<T>(6));
}

}  // namespace

TEST_CASE("Sequential: torch's names, modes and state dict without a visitor written") {
    headwise::Generator rng(1);
    auto mlp = make_mlp<float>(rng);
    std::vector<std::string> names;
    for (const auto& p : mlp.parameters()) names.push_back(p.name);
    CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.0.weight", "2.0.bias",
                                            "3.weight", "3.bias"});
    CHECK(mlp.state_dict().size() == 6);
    CHECK(mlp.parameter_count() == 4 * 6 + 6 + 6 * 6 + 6 + 6 + 6);
    mlp.eval();
    CHECK(!mlp.get<2>().inner().get<1>().is_training());
    mlp.train();
    CHECK(mlp.get<2>().inner().get<1>().is_training());
    CHECK(mlp.random_state().size() == 2);  // the dropout's seed and stream
}

TEMPLATE_TEST_CASE("Sequential and Residual: the gradients of the layers applied by hand", "",
                   float, double) {
    using T = TestType;
    headwise::Generator rng(2), rng2(2), data(3);
    auto mlp = make_mlp<T>(rng);
    auto copy = make_mlp<T>(rng2);
    const Tensor<T> x0 = Tensor<T>::randn(Shape{3, 4}, data);
    const Tensor<T> dy = Tensor<T>::randn(Shape{3, 6}, data);

    Tape<T> tape;
    const Var<T> x = tape.input(x0, true);
    tape.backward(headwise::autograd::apply(mlp, x), dy);

    // The same layers by hand: y = norm(h + drop(lin(h))), h = gelu(lin0(x)).
    auto& lin0 = copy.template get<0>();
    auto& gelu = copy.template get<1>();
    auto& lin = copy.template get<2>().inner().template get<0>();
    auto& drop = copy.template get<2>().inner().template get<1>();
    auto& norm = copy.template get<3>();
    const Tensor<T> a = lin0.forward(x0);
    const Tensor<T> h = gelu.forward(a);
    const Tensor<T> b = lin.forward(h);
    const headwise::DropoutForward<T> d = drop.forward(b);
    Tensor<T> r(h.shape());
    r.matrix() = h.matrix() + d.output.matrix();
    const Tensor<T> dr = norm.backward(r, dy);
    Tensor<T> dh = lin.backward(h, drop.backward(d, dr));
    dh.matrix() += dr.matrix();
    const Tensor<T> dx = lin0.backward(x0, gelu.backward(a, dh));

    CHECK(identical(tape.grad(x), dx));
    const auto got = mlp.grad_dict();
    const auto expected = copy.grad_dict();
    for (const auto& entry : expected) {
        CAPTURE(entry.first);
        CHECK(identical(got.at(entry.first), entry.second));
    }
}

}  // namespace test_sequential
