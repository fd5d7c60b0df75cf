// SPDX-License-Identifier: MIT
// Embedding's table in the one weight holder (WeightMatrix, marked as a table): the precision
// and weight-type switches leave it float; a table stored in a GGUF type (as from_gguf keeps a
// file's token_embd) gives the dequantized rows exactly, refuses training and the float views
// naming the call, comes back to float with with_precision(float32), and multiplies as a tied
// output layer through the holder in its format.
#include <headwise/layers/embedding.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/ops/quant_matmul.hpp>
#include <headwise/quant/dequantize.hpp>
#include <headwise/quant/quantize.hpp>
#include <headwise/random.hpp>

#include <cstdint>    // std::int64_t, std::uint8_t
#include <memory>     // std::make_shared
#include <stdexcept>  // std::logic_error
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"

namespace test_embedding_table {

using headwise::Embedding;
using headwise::FloatWeights;
using headwise::Index;
using headwise::Precision;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::WeightMatrix;
using headwise::quant::Type;

namespace {

/// The table's holder, found the way a loader finds it (the declared parameter "weight").
WeightMatrix<float>& holder_of(Embedding<float>& e) {
    headwise::detail::ListParametersWalk<float> walk;
    e.walk_module(walk, "", true);
    REQUIRE(walk.found.size() == 1);
    REQUIRE(walk.found[0].name == "weight");
    REQUIRE(walk.found[0].where.holder != nullptr);
    return *walk.found[0].where.holder;
}

/// The table quantized row by row into blocks the holder then borrows (kept alive by it).
void store(Embedding<float>& e, Type type) {
    const Tensor<float> w = Tensor<float>(TensorView<const float>(e.weight()));
    const Index rows = e.num_embeddings(), cols = e.embedding_dim();
    const std::uint64_t row_bytes = headwise::quant::row_bytes(type, cols);
    auto blocks = std::make_shared<std::vector<std::uint8_t>>(row_bytes * rows);
    for (Index r = 0; r < rows; ++r)
        headwise::quant::quantize_row(type, w.data() + r * cols, blocks->data() + r * row_bytes,
                                      cols);
    const std::uint8_t* data = blocks->data();
    holder_of(e).take_stored(type, data, row_bytes * rows,
                             std::shared_ptr<const void>(blocks, data));
}

Tensor<std::int64_t> ids(std::vector<std::int64_t> v) {
    Tensor<std::int64_t> t(Shape{static_cast<Index>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = v[i];
    return t;
}

}  // namespace

TEST_CASE("an embedding's table is a table: the switches leave it float", "[embedding]") {
    headwise::Generator rng(3);
    Embedding<float> e(16, 64, std::nullopt, rng);
    REQUIRE(holder_of(e).is_table());
    const Tensor<float> before = Tensor<float>(TensorView<const float>(e.weight()));
    e.with_weight_type(Type::q8_0, FloatWeights::release);
    CHECK(e.weight_type() == Type::f32);
    CHECK_FALSE(holder_of(e).stored());
    CHECK_FALSE(e.float_weights_released());
    e.with_precision(Precision::bf16, FloatWeights::release);
    CHECK_FALSE(e.float_weights_released());
    const Tensor<float> after = e.forward(ids({0, 5, 15}));
    for (Index j = 0; j < 64; ++j) {
        CHECK(after.data()[j] == before.data()[j]);
        CHECK(after.data()[64 + j] == before.data()[5 * 64 + j]);
    }
    // Rows of 20 values are no multiple of a block: a table is not checked, so no refusal.
    Embedding<float> odd(4, 20, std::nullopt, rng);
    CHECK_NOTHROW(odd.with_weight_type(Type::q4_0));
}

TEST_CASE("a table stored in a GGUF type: exact rows, inference only, back to float",
          "[embedding]") {
    for (Type type : {Type::q8_0, Type::q4_1, Type::f16}) {
        CAPTURE(headwise::quant::block_format(type).name);
        headwise::Generator rng(5);
        Embedding<float> e(12, 64, std::nullopt, rng);
        store(e, type);
        const WeightMatrix<float>& w = e.table();
        REQUIRE(w.stored());
        REQUIRE(w.released());
        CHECK(e.memory_bytes() == headwise::quant::row_bytes(type, 64) * 12);

        // Lookups: the blocks dequantized, exactly.
        const Tensor<float> out = e.forward(ids({7, 0, 7, 11}));
        std::vector<float> row(64);
        const std::uint64_t row_bytes = headwise::quant::row_bytes(type, 64);
        for (Index i = 0; i < 4; ++i) {
            const Index r = std::vector<Index>{7, 0, 7, 11}[static_cast<std::size_t>(i)];
            headwise::quant::dequantize_row(
                type, static_cast<const std::uint8_t*>(w.stored_rows(0, 12).data) + r * row_bytes,
                row.data(), 64);
            for (Index j = 0; j < 64; ++j) CHECK(out.data()[i * 64 + j] == row[j]);
        }

        // Tied output: X table^T through the holder equals ops::quant_matmul on the blocks.
        Tensor<float> x(Shape{3, 64});
        for (Index i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>(i % 7) - 3.0f;
        Tensor<float> y(Shape{3, 12}), ref(Shape{3, 12});
        w.forward(x.matrix(), nullptr, y.matrix(), false);
        headwise::ops::QuantMatmulWorkspace ws;
        headwise::ops::quant_matmul(x.matrix(), w.stored_rows(0, 12), nullptr, ref.matrix(), ws);
        for (Index i = 0; i < y.numel(); ++i) CHECK(y.data()[i] == ref.data()[i]);

        // Inference only: training and the float views refused, naming the call.
        Tensor<float> dy(Shape{4, 64});
        CHECK_THROWS_WITH(e.backward(ids({7, 0, 7, 11}), dy),
                          ContainsSubstring("headwise::Embedding::backward"));
        CHECK_THROWS_AS(e.weight(), std::logic_error);
        CHECK_THROWS_WITH(e.weight(), ContainsSubstring("headwise::Embedding::weight"));
        CHECK_THROWS_AS(e.grad_weight(), std::logic_error);

        // Back to float: the stored values, dequantized exactly; trainable again.
        e.with_precision(Precision::float32);
        REQUIRE_FALSE(e.table().stored());
        const Tensor<float> again = e.forward(ids({7, 0, 7, 11}));
        for (Index i = 0; i < again.numel(); ++i) CHECK(again.data()[i] == out.data()[i]);
        e.backward(ids({7, 0, 7, 11}), dy);
        CHECK(e.grad_weight().shape() == Shape({12, 64}));
    }
}

TEST_CASE("an uninitialized embedding allocates its gradient on first use", "[embedding]") {
    Embedding<float> e(8, 4, std::nullopt, headwise::uninitialized);
    CHECK_FALSE(e.has_grad_buffers());
    CHECK(e.memory_bytes() == 8 * 4 * sizeof(float));
    (void)e.grad_weight();
    CHECK(e.has_grad_buffers());
}

}  // namespace test_embedding_table
