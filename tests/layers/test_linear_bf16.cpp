// SPDX-License-Identifier: MIT
// Tests of Linear's Precision::bf16 (layers/linear.hpp): outputs against float and against the
// product of the bf16-rounded input and weight, the weight's bytes halved, the round trip back to
// float, and the error of bf16 on Linear<double>. Training in bf16: test_linear_bf16_training.
#include <headwise/layers/linear.hpp>

#include <algorithm>  // std::fill
#include <cmath>      // std::abs, std::ldexp
#include <cstring>    // std::memcmp
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/relative_error.hpp"

namespace test_linear_bf16 {

using headwise::BFloat16;
using headwise::Index;
using headwise::Linear;
using headwise::Precision;
using headwise::round_to_bf16;
using headwise::Shape;
using headwise::Tensor;

using headwise::test::relative_error;
TEST_CASE("Linear in bf16 is within 1e-2 of float and exact on the rounded operands",
          "[linear][bf16]") {
    const bool bias = GENERATE(true, false);
    CAPTURE(bias);
    std::mt19937_64 rng(26);
    const Index in = 96, out = 40;
    Linear<float> layer(in, out, bias, rng);
    const Tensor<float> x = Tensor<float>::uniform(Shape{3, 5, in}, -1.0, 1.0, rng);
    const Tensor<float> w(layer.weight());  // float weight, copied before the switch
    const Tensor<float> b(layer.bias());
    const Tensor<float> y_float = layer.forward(x);

    layer.with_precision(Precision::bf16);
    CHECK(layer.precision() == Precision::bf16);
    const Tensor<float> y = layer.forward(x);
    CHECK(relative_error(y, y_float) <= 1e-2);

    // The product of the rounded operands in double: only float's accumulation separates them.
    for (Index n = 0; n < 15; ++n)
        for (Index o = 0; o < out; ++o) {
            double expected = bias ? static_cast<double>(b.data()[o]) : 0.0, magnitude = 0;
            for (Index i = 0; i < in; ++i) {
                const double p = static_cast<double>(round_to_bf16(x.data()[n * in + i])) *
                                 round_to_bf16(w.data()[o * in + i]);
                expected += p;
                magnitude += std::abs(p);
            }
            CAPTURE(n, o);
            CHECK(std::abs(y.data()[n * out + o] - expected) <=
                  static_cast<double>(in + 2) * std::ldexp(1.0, -24) * (magnitude + 1.0));
        }

    // forward_into writes the same.
    Tensor<float> y_into(Shape{3, 5, out});
    layer.forward_into(x, y_into);
    CHECK(relative_error(y_into, y) == 0.0);
}

TEST_CASE("Linear in bf16 keeps its float parameters and adds a bf16 copy of half their bytes",
          "[linear][bf16]") {
    std::mt19937_64 rng(3);
    Linear<float> layer(64, 32, true, rng);
    const Tensor<float> w(layer.weight());
    const auto params = layer.parameters();  // as an optimiser would hold them
    const std::size_t float_bytes = layer.memory_bytes();
    CHECK(float_bytes == (64 * 32 + 32) * sizeof(float));
    layer.with_precision(Precision::bf16);
    CHECK(layer.memory_bytes() == float_bytes + 64 * 32 * sizeof(BFloat16));
    const auto params_bf16 = layer.parameters();
    REQUIRE(params_bf16.size() == params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {  // nothing moved, nothing freed
        CHECK(params_bf16[i].value.data() == params[i].value.data());
        CHECK(params_bf16[i].grad.data() == params[i].grad.data());
    }
    REQUIRE(layer.weight().shape() == Shape{32, 64});
    CHECK(std::memcmp(layer.weight().data(), w.data(), sizeof(float) * 64 * 32) == 0);

    // The copy is taken by with_precision: in evaluation mode a changed weight is used once it
    // is called again (training mode rounds the current weight on each call).
    layer.eval();
    const Tensor<float> x = Tensor<float>::uniform(Shape{3, 64}, -1.0, 1.0, rng);
    const Tensor<float> before = layer.forward(x);
    std::fill(layer.weight().data(), layer.weight().data() + 64 * 32, 0.0f);
    const Tensor<float> stale = layer.forward(x);  // still the old copy
    CHECK(std::memcmp(stale.data(), before.data(), sizeof(float) * 3 * 32) == 0);
    layer.with_precision(Precision::bf16);
    const Tensor<float> after = layer.forward(x);
    for (Index r = 0; r < 3; ++r)
        for (Index j = 0; j < 32; ++j) REQUIRE(after(r, j) == layer.bias()(j));

    layer.with_precision(Precision::float32);
    CHECK(layer.memory_bytes() == float_bytes);
}

TEST_CASE("Linear<double> refuses bf16", "[linear][bf16]") {
    std::mt19937_64 rng(5);
    Linear<double> d(8, 4, true, rng);
    try {
        d.with_precision(Precision::bf16);
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("headwise::Linear::with_precision: precision") == 0);
    }
    CHECK(d.precision() == Precision::float32);
}

}  // namespace test_linear_bf16
