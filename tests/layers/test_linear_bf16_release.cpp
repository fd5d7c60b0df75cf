// SPDX-License-Identifier: MIT
// Tests of Linear's with_precision(Precision::bf16, FloatWeights::release) (layers/linear.hpp):
// forward as a keep-mode bf16 layer bit for bit at half the weight's bytes, every call that needs
// the float weight refused with std::logic_error leaving the layer usable, and the way back to a
// trainable float layer.
#include <headwise/layers/linear.hpp>

#include <algorithm>  // std::fill
#include <cstddef>    // std::size_t
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::move

#include "support/catch.hpp"
#include "support/released_weights.hpp"

namespace test_linear_bf16_release {

using headwise::BFloat16;
using headwise::FloatWeights;
using headwise::Index;
using headwise::Linear;
using headwise::Precision;
using headwise::round_to_bf16;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::test::check_refused;
using headwise::test::same_bits;

TEST_CASE("Linear released in bf16 forwards as keep bit for bit, at half the float bytes",
          "[linear][bf16][release]") {
    const bool bias = GENERATE(true, false);
    CAPTURE(bias);
    constexpr Index in = 48, out = 24;
    std::mt19937_64 rng(11);
    Linear<float> keep(in, out, bias, rng);
    Linear<float> released = keep;
    const std::size_t float_bytes = keep.memory_bytes();
    keep.with_precision(Precision::bf16);
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.precision() == Precision::bf16);
    CHECK(released.float_weights_released());
    CHECK_FALSE(keep.float_weights_released());
    CHECK_FALSE(released.has_grad_buffers());

    const std::size_t weight_bytes = in * out * sizeof(float);
    const std::size_t bias_bytes = bias ? out * sizeof(float) : 0;
    CHECK(float_bytes == weight_bytes + bias_bytes);
    CHECK(keep.memory_bytes() == weight_bytes + in * out * sizeof(BFloat16) + bias_bytes);
    CHECK(released.memory_bytes() == in * out * sizeof(BFloat16) + bias_bytes);
    if (!bias) CHECK(2 * released.memory_bytes() == float_bytes);  // exactly half

    const Tensor<float> x = Tensor<float>::uniform(Shape{2, 5, in}, -1.0, 1.0, rng);
    // Training mode (a new layer's): keep rounds its unchanged float weight, release reads the
    // copy; the same bf16 weight either way.
    CHECK(same_bits(released.forward(x), keep.forward(x)));
    keep.eval();
    released.eval();
    CHECK(same_bits(released.forward(x), keep.forward(x)));
    Tensor<float> y(Shape{2, 5, out}), y_keep(Shape{2, 5, out});
    released.forward_into(x, y);
    keep.forward_into(x, y_keep);
    CHECK(same_bits(y, y_keep));
    // Released a second time: nothing more happens.
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.memory_bytes() == in * out * sizeof(BFloat16) + bias_bytes);
    CHECK(same_bits(released.forward(x), y_keep));
}

TEST_CASE("Linear released refuses every call that needs the float weight, staying usable",
          "[linear][bf16][release]") {
    constexpr Index in = 16, out = 8;
    std::mt19937_64 rng(12);
    Linear<float> layer(in, out, true, rng);
    const Tensor<float> bias_before(layer.bias());
    layer.with_precision(Precision::bf16, FloatWeights::release);
    layer.eval();
    const Tensor<float> x = Tensor<float>::uniform(Shape{3, in}, -1.0, 1.0, rng);
    const Tensor<float> y = layer.forward(x);
    const std::size_t bytes = layer.memory_bytes();
    const Tensor<float> dy = Tensor<float>::uniform(Shape{3, out}, -1.0, 1.0, rng);
    const Linear<float>& c = layer;

    const auto still_usable = [&] {
        CHECK(layer.float_weights_released());
        CHECK(layer.precision() == Precision::bf16);
        CHECK(layer.memory_bytes() == bytes);
        CHECK(same_bits(layer.forward(x), y));
    };
    check_refused("headwise::Linear::backward", [&] { layer.backward(x, dy); });
    still_usable();
    check_refused("headwise::Linear::backward_into", [&] {
        Tensor<float> dx(x.shape());
        layer.backward_into(x, dy, dx);
    });
    still_usable();
    check_refused("headwise::Linear::weight", [&] { (void)layer.weight(); });
    check_refused("headwise::Linear::weight", [&] { (void)c.weight(); });
    check_refused("headwise::Linear::grad_weight", [&] { (void)layer.grad_weight(); });
    check_refused("headwise::Linear::grad_weight", [&] { (void)c.grad_weight(); });
    check_refused("headwise::Linear::take_weight", [&] {
        layer.take_weight(Tensor<float>(Shape{out, in}));
    });
    still_usable();
    // The module contract's calls go through visit_parameters.
    const std::string visit = "headwise::Linear::visit_parameters";
    check_refused(visit, [&] { (void)layer.parameters(); });
    check_refused(visit, [&] { (void)c.parameters(); });
    check_refused(visit, [&] { (void)layer.state_dict(); });
    check_refused(visit, [&] { (void)layer.grad_dict(); });
    check_refused(visit, [&] { (void)layer.parameter_count(); });
    check_refused(visit, [&] { layer.zero_grad(); });
    Linear<float> other(in, out, true, rng);
    const auto sd = other.state_dict();
    check_refused(visit, [&] { layer.load_state_dict(sd); });
    still_usable();
    CHECK(same_bits(Tensor<float>(layer.bias()), bias_before));  // load_state_dict wrote nothing
    check_refused("headwise::Linear::with_precision",
                  [&] { layer.with_precision(Precision::bf16, FloatWeights::keep); });
    check_refused("headwise::Linear::with_precision",
                  [&] { layer.with_precision(Precision::bf16); });
    still_usable();

    // What works: the mode switches, the bias and its gradient.
    layer.train();
    CHECK(same_bits(layer.forward(x), y));
    layer.eval();
    still_usable();
    REQUIRE(layer.bias().shape() == Shape{out});
    CHECK(same_bits(Tensor<float>(layer.bias()), bias_before));
    REQUIRE(layer.grad_bias().shape() == Shape{out});
    CHECK(layer.grad_bias()(0) == 0.0f);
    Tensor<float> b(Shape{out});
    layer.take_bias(std::move(b));
    CHECK(layer.bias()(0) == 0.0f);
}

TEST_CASE("Linear constructed uninitialized and released keeps a bias gradient of its shape",
          "[linear][bf16][release]") {
    Linear<float> layer(6, 4, true, headwise::uninitialized);
    std::fill(layer.weight().data(), layer.weight().data() + 24, 0.5f);
    layer.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(layer.grad_bias().shape() == Shape{4});
    CHECK(layer.memory_bytes() == 24 * sizeof(BFloat16) + 4 * sizeof(float));
    layer.with_precision(Precision::float32);
    CHECK(layer.grad_weight().shape() == Shape{4, 6});
    CHECK(layer.grad_bias().shape() == Shape{4});
    CHECK(layer.weight()(3, 5) == 0.5f);
}

TEST_CASE("Linear released returns to float32 with the bf16 weight widened, and trains",
          "[linear][bf16][release]") {
    constexpr Index in = 32, out = 12;
    std::mt19937_64 rng(13);
    Linear<float> layer(in, out, true, rng);
    const std::size_t float_bytes = layer.memory_bytes();
    Linear<float> rounded = layer;  // the float layer with its weight rounded to bf16
    {
        float* w = rounded.weight().data();
        for (Index i = 0; i < in * out; ++i) w[i] = round_to_bf16(w[i]);
    }
    layer.with_precision(Precision::bf16, FloatWeights::release);
    layer.with_precision(Precision::float32);
    CHECK_FALSE(layer.float_weights_released());
    CHECK(layer.precision() == Precision::float32);
    CHECK(layer.memory_bytes() == float_bytes);
    CHECK(layer.has_grad_buffers());
    CHECK(same_bits(Tensor<float>(layer.weight()), Tensor<float>(rounded.weight())));  // exact
    CHECK(same_bits(Tensor<float>(layer.bias()), Tensor<float>(rounded.bias())));
    for (const auto& p : layer.parameters()) {
        for (Index i = 0; i < p.grad.numel(); ++i) REQUIRE(p.grad.data()[i] == 0.0f);
    }

    // Training: the same forward, gradients and SGD step as the float layer of rounded weights.
    const Tensor<float> x = Tensor<float>::uniform(Shape{4, in}, -1.0, 1.0, rng);
    const Tensor<float> dy = Tensor<float>::uniform(Shape{4, out}, -1.0, 1.0, rng);
    CHECK(same_bits(layer.forward(x), rounded.forward(x)));
    CHECK(same_bits(layer.backward(x, dy), rounded.backward(x, dy)));
    CHECK(same_bits(Tensor<float>(layer.grad_weight()), Tensor<float>(rounded.grad_weight())));
    CHECK(same_bits(Tensor<float>(layer.grad_bias()), Tensor<float>(rounded.grad_bias())));
    for (Linear<float>* m : {&layer, &rounded})
        for (auto& p : m->parameters())
            for (Index i = 0; i < p.value.numel(); ++i)
                p.value.data()[i] -= 0.1f * p.grad.data()[i];
    CHECK(same_bits(layer.forward(x), rounded.forward(x)));
    // And back to bf16 with either choice.
    layer.with_precision(Precision::bf16);
    CHECK(layer.memory_bytes() == float_bytes + in * out * sizeof(BFloat16));
    layer.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(layer.float_weights_released());
}

TEST_CASE("Linear<double> refuses bf16 release, and unknown FloatWeights values are refused",
          "[linear][bf16][release]") {
    std::mt19937_64 rng(14);
    Linear<double> d(8, 4, true, rng);
    const Tensor<double> w(d.weight());
    REQUIRE_THROWS_MATCHES(
        d.with_precision(Precision::bf16, FloatWeights::release), std::invalid_argument,
        Message("headwise::Linear::with_precision: precision: Precision::float32 "
                "for a Linear<double>, got Precision::bf16 (bf16 is for float "
                "modules)"));
    CHECK(d.precision() == Precision::float32);
    CHECK_FALSE(d.float_weights_released());
    CHECK(same_bits<double>(d.weight(), w.view()));

    Linear<float> f(8, 4, true, rng);
    REQUIRE_THROWS_MATCHES(
        f.with_precision(Precision::bf16, static_cast<FloatWeights>(7)), std::invalid_argument,
        Message("headwise::Linear::with_precision: float_weights: FloatWeights::keep or "
                "FloatWeights::release, got 7"));
    CHECK(f.precision() == Precision::float32);
    CHECK_FALSE(f.float_weights_released());
}

}  // namespace test_linear_bf16_release
