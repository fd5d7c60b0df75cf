// SPDX-License-Identifier: MIT
// headwise::uninitialized: Linear, Embedding and MultiheadAttention constructed for loading draw
// no weights and allocate their gradient buffers only when something asks for them.

#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/layers/embedding.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/uninitialized.hpp>

#include <cstdint>   // std::int64_t
#include <optional>  // std::nullopt
#include <string>    // std::string
#include <tuple>     // std::tuple

#include "support/catch.hpp"
#include "support/instantiations.hpp"

namespace test_uninitialized {

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

TEMPLATE_TEST_CASE(
    "MultiheadAttention(options, uninitialized): loaded, it computes what the module "
    "it was loaded from computes",
    "[layers][attention][uninitialized]", float, double) {
    using T = TestType;
    // embed_dim, heads, kv heads, head_dim, kdim, bias, add_bias_kv
    const auto config = GENERATE(table<Index, Index, Index, Index, Index, bool, bool>({
        {8, 2, 0, 0, 0, true, false},   // packed in-projection with biases
        {8, 4, 2, 0, 0, false, false},  // grouped-query, no biases
        {8, 2, 1, 6, 0, true, false},   // head_dim 6: inner width 12 != E
        {8, 2, 0, 0, 5, true, true},    // separate q/k/v matrices (kdim 5), bias_k and bias_v
    }));
    headwise::MultiheadAttentionOptions o;
    std::tie(o.embed_dim, o.num_heads, o.num_kv_heads, o.head_dim, o.kdim, o.bias, o.add_bias_kv) =
        config;
    CAPTURE(o.embed_dim, o.num_heads, o.num_kv_heads, o.head_dim, o.kdim, o.bias, o.add_bias_kv);
    o.vdim = o.kdim;
    const Index kdim = o.kdim == 0 ? o.embed_dim : o.kdim;

    headwise::MultiheadAttention<T> source(o, 7);
    headwise::MultiheadAttention<T> loaded(o, headwise::uninitialized);
    // Before loading: the biases zero (as PyTorch initialises them), the names and shapes those
    // of a seeded module.
    const auto fresh = loaded.state_dict();
    const auto expected = source.state_dict();
    REQUIRE(fresh.size() == expected.size());
    for (const auto& [name, value] : expected) {
        CAPTURE(name);
        REQUIRE(fresh.count(name) == 1);
        CHECK(fresh.at(name).shape() == value.shape());
        if (name.find("bias") != std::string::npos)
            for (Index i = 0; i < value.numel(); ++i) CHECK(fresh.at(name).data()[i] == T(0));
    }
    loaded.load_state_dict(expected);

    Generator rng(3);
    const Tensor<T> q = Tensor<T>::randn(Shape{2, 3, o.embed_dim}, rng);
    const Tensor<T> kv = Tensor<T>::randn(Shape{2, 4, kdim}, rng);
    const Tensor<T> dy = Tensor<T>::randn(Shape{2, 3, o.embed_dim}, rng);
    headwise::AttentionMasks<T> masks;
    masks.is_causal = kdim == o.embed_dim;
    const auto fs =
        source.forward(q, kdim == o.embed_dim ? q : kv, kdim == o.embed_dim ? q : kv, masks);
    const auto fl =
        loaded.forward(q, kdim == o.embed_dim ? q : kv, kdim == o.embed_dim ? q : kv, masks);
    REQUIRE(fl.output.shape() == fs.output.shape());
    for (Index i = 0; i < fs.output.numel(); ++i) CHECK(fl.output.data()[i] == fs.output.data()[i]);
    // Backward writes into gradient buffers allocated on first use, as the seeded module's.
    source.backward(fs, dy);
    loaded.backward(fl, dy);
    const auto gs = source.grad_dict();
    const auto gl = loaded.grad_dict();
    REQUIRE(gl.size() == gs.size());
    for (const auto& [name, g] : gs) {
        CAPTURE(name);
        REQUIRE(gl.at(name).shape() == g.shape());
        for (Index i = 0; i < g.numel(); ++i) CHECK(gl.at(name).data()[i] == g.data()[i]);
    }
    // Per-head views of an uninitialized module, gradients included, and pruning.
    headwise::MultiheadAttention<T> other(o, headwise::uninitialized);
    other.load_state_dict(expected);
    if (o.bias) CHECK(other.head(1).q_bias_grad().numel() > 0);
    if (o.num_kv_heads != 2) {  // (two groups of two: pruning one head would leave them unequal)
        other.prune_heads({0});
        CHECK(other.num_heads() == o.num_heads - 1);
    }
}

}  // namespace test_uninitialized
