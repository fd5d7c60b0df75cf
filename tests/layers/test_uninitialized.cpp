// SPDX-License-Identifier: MIT
// headwise::uninitialized: Linear and Embedding constructed for loading draw no weights and
// allocate their gradient buffers only when something asks for them.

#include <headwise/layers/embedding.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/uninitialized.hpp>

#include <cstdint>   // std::int64_t
#include <optional>  // std::nullopt
#include <string>    // std::string

#include "support/catch.hpp"
#include "support/instantiations.hpp"

using headwise::Generator;
using headwise::Index;
using headwise::Shape;
using headwise::Tensor;

TEST_CASE("Linear(..., uninitialized): no gradient buffers until asked for, then zero",
          "[layers][linear][uninitialized]") {
    headwise::Linear<float> lin(3, 2, true, headwise::uninitialized);
    CHECK(lin.weight().shape() == Shape{2, 3});
    CHECK(lin.bias().shape() == Shape{2});
    CHECK_FALSE(lin.has_grad_buffers());
    // Loading and running forward need no gradients.
    lin.load_state_dict({{"weight", Tensor<float>(Shape{2, 3}, {1, 2, 3, 4, 5, 6})},
                         {"bias", Tensor<float>(Shape{2}, {0.5f, -0.5f})}});
    const Tensor<float> x(Shape{1, 3}, {1, 1, 1});
    const Tensor<float> y = lin.forward(x);
    CHECK(y.data()[0] == 6.5f);
    CHECK(y.data()[1] == 14.5f);
    // The module contract: the gradient views exist (zero) whenever they are asked for.
    const auto& const_lin = lin;
    const auto grads = const_lin.grad_dict();
    CHECK(lin.has_grad_buffers());
    REQUIRE(grads.at("weight").shape() == Shape{2, 3});
    REQUIRE(grads.at("bias").shape() == Shape{2});
    for (Index i = 0; i < 6; ++i) CHECK(grads.at("weight").data()[i] == 0.0f);
    // and backward accumulates into them as into an initialised layer's.
    headwise::Linear<float> fresh(3, 2, true, headwise::uninitialized);
    fresh.load_state_dict(lin.state_dict());
    const Tensor<float> dy(Shape{1, 2}, {1, 2});
    fresh.backward(x, dy);
    CHECK(fresh.grad_bias().data()[1] == 2.0f);
    CHECK(fresh.grad_weight().data()[3] == 2.0f);
    Generator rng(1);
    headwise::Linear<float> eager(3, 2, true, rng);
    CHECK(eager.has_grad_buffers());
}

TEST_CASE("Embedding(..., uninitialized): no gradient buffer until asked for",
          "[layers][embedding][uninitialized]") {
    headwise::Embedding<double> emb(4, 2, std::nullopt, headwise::uninitialized);
    CHECK(emb.weight().shape() == Shape{4, 2});
    CHECK_FALSE(emb.has_grad_buffers());
    // Written through weight(), as a loader does: load_state_dict goes through parameters(),
    // which hands out gradient views and so allocates them.
    for (Index i = 0; i < 8; ++i) emb.weight().data()[i] = static_cast<double>(i);
    const Tensor<std::int64_t> ids(Shape{2}, {3, 1});
    const Tensor<double> out = emb.forward(ids);
    CHECK(out.data()[0] == 6.0);
    CHECK(out.data()[3] == 3.0);
    CHECK_FALSE(emb.has_grad_buffers());
    const Tensor<double> dy(Shape{2, 2}, {1, 1, 1, 1});
    emb.backward(ids, dy);
    CHECK(emb.has_grad_buffers());
    CHECK(emb.grad_weight().data()[6] == 1.0);
    CHECK(emb.grad_weight().data()[0] == 0.0);
    emb.zero_grad();
    CHECK(emb.parameters().at(0).grad.data()[6] == 0.0);
    CHECK_THROWS_WITH(headwise::Embedding<float>(4, 2, 4, headwise::uninitialized),
                      ContainsSubstring("padding_idx: must be in [-4, 4)"));
}
