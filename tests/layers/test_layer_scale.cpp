// SPDX-License-Identifier: MIT
// LayerScale: forward and backward against a reference loop in double, gradcheck, and the
// module contract (parameters, state dict, strict load, modes) from its one declaration.
#include <random>
#include <stdexcept>
#include <string>

#include "headwise/layers/layer_scale.hpp"
#include "headwise/layers/module.hpp"
#include "support/catch.hpp"

namespace test_layer_scale {

using headwise::Index;
using headwise::LayerScale;
using headwise::Shape;
using headwise::Tensor;

namespace {

Tensor<double> random_tensor(const Shape& shape, std::mt19937_64& rng) {
    std::normal_distribution<double> normal;
    Tensor<double> t(shape);
    for (double& v : t) v = normal(rng);
    return t;
}

}  // namespace

TEST_CASE("LayerScale forward and backward equal the reference loops", "[layer_scale]") {
    std::mt19937_64 rng(3);
    constexpr Index B = 2, L = 3, C = 5;
    LayerScale<double> ls(C, 0.1);
    for (Index c = 0; c < C; ++c) ls.gamma().data()[c] = 0.1 * static_cast<double>(c + 1);
    const Tensor<double> x = random_tensor(Shape{B, L, C}, rng);
    const Tensor<double> dy = random_tensor(Shape{B, L, C}, rng);
    const Tensor<double> y = ls.forward(x);
    const Tensor<double> dx = ls.backward(x, dy);
    std::vector<double> dgamma(C, 0.0);
    for (Index i = 0; i < B * L; ++i)
        for (Index c = 0; c < C; ++c) {
            const Index k = i * C + c;
            CHECK(y.data()[k] == x.data()[k] * ls.gamma().data()[c]);
            CHECK(dx.data()[k] == dy.data()[k] * ls.gamma().data()[c]);
            dgamma[static_cast<std::size_t>(c)] += dy.data()[k] * x.data()[k];
        }
    for (Index c = 0; c < C; ++c)
        CHECK(ls.grad_gamma().data()[c] ==
              Approx(dgamma[static_cast<std::size_t>(c)]).epsilon(1e-14));
}

TEST_CASE("LayerScale passes gradcheck for its input and gamma", "[layer_scale][gradcheck]") {
    std::mt19937_64 rng(5);
    LayerScale<double> ls(4, 0.5);
    const Tensor<double> x = random_tensor(Shape{3, 4}, rng);
    const Tensor<double> dy = random_tensor(Shape{3, 4}, rng);
    // d/dx and d/dgamma of sum(forward(x) ⊙ dy), by central differences.
    const double h = 1e-6;
    auto loss = [&](const Tensor<double>& in) {
        const Tensor<double> y = ls.forward(in);
        double s = 0;
        for (Index i = 0; i < y.numel(); ++i) s += y.data()[i] * dy.data()[i];
        return s;
    };
    ls.zero_grad();
    const Tensor<double> dx = ls.backward(x, dy);
    for (Index i = 0; i < x.numel(); ++i) {
        Tensor<double> xp = x, xm = x;
        xp.data()[i] += h;
        xm.data()[i] -= h;
        CHECK(dx.data()[i] == Approx((loss(xp) - loss(xm)) / (2 * h)).epsilon(1e-8));
    }
    for (Index c = 0; c < 4; ++c) {
        const double g = ls.gamma().data()[c];
        ls.gamma().data()[c] = g + h;
        const double lp = loss(x);
        ls.gamma().data()[c] = g - h;
        const double lm = loss(x);
        ls.gamma().data()[c] = g;
        CHECK(ls.grad_gamma().data()[c] == Approx((lp - lm) / (2 * h)).epsilon(1e-8));
    }
}

TEST_CASE("LayerScale gets the module contract from its declaration", "[layer_scale][module]") {
    LayerScale<float> ls(3, 1e-5);
    const auto params = ls.parameters();
    REQUIRE(params.size() == 1);
    CHECK(params[0].name == "gamma");
    CHECK(params[0].value.shape() == Shape{3});
    CHECK(ls.parameter_count() == 3);
    CHECK(ls.memory_bytes() == 3 * sizeof(float));
    auto sd = ls.state_dict("ls.");
    REQUIRE(sd.count("ls.gamma") == 1);
    sd.at("ls.gamma").data()[1] = 2.0f;
    ls.load_state_dict(sd, "ls.");
    CHECK(ls.gamma().data()[1] == 2.0f);
    sd.emplace("ls.beta", Tensor<float>(Shape{3}));
    CHECK_THROWS_WITH(ls.load_state_dict(sd, "ls."),
                      Catch::Matchers::StartsWith(
                          "headwise::LayerScale::load_state_dict: ls.beta: unexpected key"));
    CHECK(ls.gamma().data()[1] == 2.0f);
    ls.eval();
    CHECK_FALSE(ls.is_training());
    CHECK(ls.random_state().empty());
    CHECK_THROWS_WITH(LayerScale<float>(0), Catch::Matchers::Contains("dim"));
    CHECK_THROWS_AS(ls.forward(Tensor<float>(Shape{2, 4})), std::invalid_argument);
    // No weight matrix: a precision switch changes no bytes, and nothing is released.
    ls.with_precision(headwise::Precision::bf16, headwise::FloatWeights::release);
    CHECK(ls.precision() == headwise::Precision::bf16);
    CHECK_FALSE(ls.float_weights_released());
    CHECK(ls.memory_bytes() == 3 * sizeof(float));
}

}  // namespace test_layer_scale
