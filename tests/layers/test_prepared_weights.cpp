// SPDX-License-Identifier: MIT
// Prepared float weights (Module::with_prepared_weights, WeightMatrix::set_prepared,
// ops::PreparedMatrix): the product within the float rounding bound of a double reference, the
// same bits from call to call; the switch through every composite (Linear, the encoder and
// decoder layers in every projection, BertModel, LlamaForCausalLM); the copies taken at eval(),
// after load_state_dict and after optimiser steps in training; bf16 and stored weights left as
// they are; double modules and builds without oneDNN unchanged (a no-op).
#include <headwise/layers/linear.hpp>
#include <headwise/layers/transformer_decoder_layer.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>
#include <headwise/models/bert.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/ops/prepared_gemm.hpp>
#include <headwise/optim/sgd.hpp>
#include <headwise/precision.hpp>
#include <headwise/quant/types.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::ldexp
#include <cstdint>    // std::int64_t
#include <random>     // std::mt19937_64
#include <string>     // std::string
#include <tuple>      // std::tuple

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_models.hpp"
#include "support/projections.hpp"
#include "support/released_weights.hpp"

namespace test_prepared_weights {

using namespace headwise;
using headwise::test::kProjections;
using headwise::test::same_bits;

namespace {

/// Whether this build and machine prepare float weights (oneDNN linked): the switch is a
/// documented no-op otherwise, and the tests check that instead.
const bool kPrepares = ops::prepared_gemm_available();

/// The largest |a - b| over the elements, scaled by the largest |b| (at least 1).
double scaled_difference(const Tensor<float>& a, const Tensor<float>& b) {
    REQUIRE(a.shape() == b.shape());
    double diff = 0, scale = 1;
    for (Index i = 0; i < a.numel(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(a.data()[i]) - b.data()[i]));
        scale = std::max(scale, std::abs(static_cast<double>(b.data()[i])));
    }
    return diff / scale;
}

/// How far a prepared composite's output may lie from the plain one's: both are float
/// computations of the same function whose products sum in different orders; layer norms and
/// softmax keep the differences at float rounding times a modest growth.
constexpr double kCompositeTolerance = 2e-5;

}  // namespace

TEST_CASE("PreparedMatrix multiplies within float rounding of a double reference",
          "[prepared][ops]") {
    if (!kPrepares) {
        CHECK(ops::PreparedMatrix::make(nullptr, 4, 4, 4) == nullptr);
        CHECK(std::string(ops::prepared_gemm_backend()) == "none");
        return;
    }
    CHECK(std::string(ops::prepared_gemm_backend()) == "dnnl");
    // (N, in, out, bias, row padding of X and Y)
    const auto [N, in, out, bias, pad] =
        GENERATE(table<Index, Index, Index, bool, Index>({{1, 384, 1152, true, 0},
                                                          {12, 384, 384, true, 0},
                                                          {3, 17, 5, false, 3},
                                                          {33, 64, 96, true, 7},
                                                          {128, 384, 1536, true, 0},
                                                          {7, 1536, 384, false, 1}}));
    CAPTURE(N, in, out, bias, pad);
    std::mt19937_64 rng(7);
    const Tensor<float> W = Tensor<float>::randn({out, in}, rng);
    const Tensor<float> b = Tensor<float>::randn({out}, rng);
    const Tensor<float> Xs = Tensor<float>::randn({N, in + pad}, rng);  // X: its first in columns
    const auto prepared = ops::PreparedMatrix::make(W.data(), out, in, in);
    REQUIRE(prepared != nullptr);
    CHECK(prepared->rows() == out);
    CHECK(prepared->cols() == in);
    CHECK(prepared->bytes() >= static_cast<std::size_t>(out * in) * sizeof(float));

    Tensor<float> Ys(Shape{N, out + pad});
    Ys.fill(std::nanf(""));  // overwritten, never read
    const ConstMatrixRef<float> X = Xs.matrix().leftCols(in);
    prepared->forward(X, bias ? b.data() : nullptr, Ys.matrix().leftCols(out));
    // Each y_nj within K u sum_k |x_nk w_jk| (+ |b_j|) of the sum in double (the float error
    // bound of any order of summation, u = 2^-24), and the padding columns untouched.
    const double u = std::ldexp(1.0, -24);
    double worst = 0;  // the largest error as a fraction of its bound
    // Raw rows: the reference is 75 M products for the largest case, which element access
    // through the tensors took more than a minute for in the unoptimised sanitizer build.
    for (Index n = 0; n < N; ++n) {
        const float* x = Xs.data() + n * (in + pad);
        for (Index j = 0; j < out; ++j) {
            const float* w = W.data() + j * in;
            double ref = bias ? b(j) : 0.0, mag = bias ? std::abs(b(j)) : 0.0;
            for (Index k = 0; k < in; ++k) {
                const double p = static_cast<double>(x[k]) * w[k];
                ref += p;
                mag += std::abs(p);
            }
            const double bound = static_cast<double>(in + 1) * u * mag;
            worst = std::max(worst, std::abs(Ys(n, j) - ref) / bound);
        }
        for (Index j = out; j < out + pad; ++j) CHECK(std::isnan(Ys(n, j)));
    }
    CAPTURE(worst);
    CHECK(worst <= 1.0);

    // The same bits from call to call.
    Tensor<float> again(Shape{N, out + pad});
    again.fill(std::nanf(""));
    prepared->forward(X, bias ? b.data() : nullptr, again.matrix().leftCols(out));
    CHECK(same_bits(again, Ys));

    // Shapes checked.
    Tensor<float> wrong(Shape{N, out + 1});
    CHECK_THROWS_MATCHES(
        prepared->forward(X, nullptr, wrong.matrix()), shape_error,
        Catch::Matchers::Message("headwise::ops::PreparedMatrix::forward: Y: expected shape [" +
                                 std::to_string(N) + ", " + std::to_string(out) + "], got [" +
                                 std::to_string(N) + ", " + std::to_string(out + 1) + "]"));
}

TEST_CASE("Linear with prepared weights: taken at eval and again after loads and training steps",
          "[prepared][linear]") {
    std::mt19937_64 rng(3);
    Linear<float> plain(48, 40, /*bias=*/true, rng);
    Linear<float> fc = plain;
    const std::size_t float_bytes = fc.memory_bytes();
    const auto x = Tensor<float>::randn({2, 5, 48}, rng);

    // A new module is in training mode: the wish is kept, nothing is prepared until eval().
    CHECK(&fc.with_prepared_weights() == &fc);
    CHECK_FALSE(fc.prepared_weights());
    CHECK(same_bits(fc.forward(x), plain.forward(x)));
    fc.eval();
    plain.eval();
    CHECK(fc.prepared_weights() == kPrepares);
    CHECK(fc.memory_bytes() >= float_bytes + (kPrepares ? 48 * 40 * sizeof(float) : 0));
    const Tensor<float> y = fc.forward(x);
    CHECK(scaled_difference(y, plain.forward(x)) <= kCompositeTolerance);
    if (!kPrepares) CHECK(same_bits(y, plain.forward(x)));
    CHECK(same_bits(fc.forward(x), y));

    // load_state_dict takes the copy anew: the prepared product follows the new weights.
    std::mt19937_64 rng2(99);
    Linear<float> other(48, 40, true, rng2);
    other.eval();
    fc.load_state_dict(other.state_dict());
    CHECK(fc.prepared_weights() == kPrepares);
    CHECK(scaled_difference(fc.forward(x), other.forward(x)) <= kCompositeTolerance);

    // Training steps (the products read the master), then eval(): the copy is the new weights.
    fc.train();
    CHECK_FALSE(fc.prepared_weights());
    SGDOptions o;
    o.lr = 0.5;
    SGD<float> sgd(fc.parameters(), o);
    fc.zero_grad();
    const Tensor<float> y_train = fc.forward(x);
    CHECK(same_bits(y_train, other.forward(x)));  // the master, as the plain product reads it
    Tensor<float> dy(y_train.shape());
    dy.fill(1.0f);
    fc.backward(x, dy);
    sgd.step();
    Linear<float> stepped = plain;
    stepped.load_state_dict(fc.state_dict());  // the stepped weights, without prepared copies
    fc.eval();
    CHECK(fc.prepared_weights() == kPrepares);
    CHECK(scaled_difference(fc.forward(x), stepped.forward(x)) <= kCompositeTolerance);
    CHECK(scaled_difference(fc.forward(x), other.forward(x)) > 1e-2);

    // Off: the copies freed, the plain product bit for bit.
    fc.with_prepared_weights(false);
    CHECK_FALSE(fc.prepared_weights());
    CHECK(fc.memory_bytes() == float_bytes);
    CHECK(same_bits(fc.forward(x), stepped.forward(x)));
}

TEST_CASE("Prepared weights apply to float32 only: bf16 and stored weights read as those",
          "[prepared][linear]") {
    std::mt19937_64 rng(5);
    Linear<float> fc(64, 32, true, rng);
    fc.eval();
    Linear<float> bf16 = fc;
    bf16.with_precision(Precision::bf16);
    fc.with_prepared_weights();
    CHECK(fc.prepared_weights() == kPrepares);
    const auto x = Tensor<float>::randn({3, 64}, rng);

    fc.with_precision(Precision::bf16);
    CHECK_FALSE(fc.prepared_weights());
    CHECK(same_bits(fc.forward(x), bf16.forward(x)));
    fc.with_precision(Precision::float32);  // the wish kept
    CHECK(fc.prepared_weights() == kPrepares);

    Linear<float> q8 = fc;
    q8.with_prepared_weights(false).with_weight_type(quant::Type::q8_0);
    fc.with_weight_type(quant::Type::q8_0);
    CHECK_FALSE(fc.prepared_weights());
    CHECK(same_bits(fc.forward(x), q8.forward(x)));
    fc.with_precision(Precision::float32);
    CHECK(fc.prepared_weights() == kPrepares);
}

TEST_CASE("Double modules: with_prepared_weights is a no-op", "[prepared][double]") {
    // oneDNN has no f64 matmul: a double module keeps the plain product, bit for bit.
    std::mt19937_64 rng(11);
    TransformerEncoderLayerOptions o;
    o.d_model = 16;
    o.nhead = 4;
    o.dim_feedforward = 32;
    o.dropout = 0.0;
    TransformerEncoderLayer<double> layer(o, 4);
    layer.eval();
    TransformerEncoderLayer<double> plain = layer;
    const std::size_t bytes = layer.memory_bytes();
    CHECK(&layer.with_prepared_weights() == &layer);
    CHECK_FALSE(layer.prepared_weights());
    CHECK(layer.memory_bytes() == bytes);
    const auto x = Tensor<double>::randn({2, 6, 16}, rng);
    CHECK(same_bits(layer.forward(x, {}).output, plain.forward(x, {}).output));
}

/// An encoder or decoder layer's options: d_model 32, 4 heads, feed-forward 64, dropout 0.1
/// (inactive in evaluation mode), the given projection.
template <class Options>
Options small_layer_options(Projection projection) {
    Options options;
    options.d_model = 32;
    options.nhead = 4;
    options.dim_feedforward = 64;
    options.dropout = 0.1;
    options.projection = projection;
    return options;
}

TEST_CASE("Encoder and decoder layers switch every weight matrix in every projection",
          "[prepared][encoder][decoder]") {
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(to_string(projection));
    std::mt19937_64 rng(13);
    TransformerEncoderLayer<float> encoder(
        small_layer_options<TransformerEncoderLayerOptions>(projection), 21);
    encoder.eval();
    TransformerEncoderLayer<float> encoder_plain = encoder;
    encoder.with_prepared_weights();
    CHECK(encoder.prepared_weights() == kPrepares);
    CHECK(encoder.self_attn().prepared_weights() == kPrepares);
    CHECK(encoder.linear1().prepared_weights() == kPrepares);
    CHECK(encoder.linear2().prepared_weights() == kPrepares);
    const auto x = Tensor<float>::randn({2, 7, 32}, rng);
    AttentionMasks<float> causal;
    causal.is_causal = true;
    CHECK(scaled_difference(encoder.forward(x, causal).output,
                            encoder_plain.forward(x, causal).output) <= kCompositeTolerance);

    TransformerDecoderLayer<float> decoder(
        small_layer_options<TransformerDecoderLayerOptions>(projection), 22);
    decoder.eval();
    TransformerDecoderLayer<float> decoder_plain = decoder;
    decoder.with_prepared_weights();
    CHECK(decoder.prepared_weights() == kPrepares);
    const auto memory = Tensor<float>::randn({2, 5, 32}, rng);
    CHECK(scaled_difference(decoder.forward(x, memory, causal, {}).output,
                            decoder_plain.forward(x, memory, causal, {}).output) <=
          kCompositeTolerance);
    // Off again: bit for bit the plain layer.
    decoder.with_prepared_weights(false);
    CHECK_FALSE(decoder.prepared_weights());
    CHECK(same_bits(decoder.forward(x, memory, causal, {}).output,
                    decoder_plain.forward(x, memory, causal, {}).output));
}

TEST_CASE("BertModel and LlamaForCausalLM with prepared weights", "[prepared][models]") {
    auto bert = models::BertModel<float>::from_pretrained(headwise::test::tiny_bert_dir());
    auto bert_plain = bert;
    bert.with_prepared_weights();
    CHECK(bert.prepared_weights() == kPrepares);
    Tensor<std::int64_t> ids(Shape{2, 6});
    for (Index i = 0; i < ids.numel(); ++i) ids.data()[i] = (7 * i + 3) % 40;
    CHECK(scaled_difference(bert.forward(ids), bert_plain.forward(ids)) <= kCompositeTolerance);

    const std::string llama_dir = (headwise::test::golden_dir() / "llama" / "untied").string();
    auto llama = models::LlamaForCausalLM<float>::from_pretrained(llama_dir);
    auto llama_plain = llama;
    llama.with_prepared_weights();
    CHECK(llama.prepared_weights() == kPrepares);
    CHECK(scaled_difference(llama.forward(ids), llama_plain.forward(ids)) <= kCompositeTolerance);
    // Loading the plain model's weights again keeps the copies current.
    llama.load_state_dict(llama_plain.state_dict());
    CHECK(llama.prepared_weights() == kPrepares);
    CHECK(scaled_difference(llama.forward(ids), llama_plain.forward(ids)) <= kCompositeTolerance);
}

#if HEADWISE_PREPARED_DNNL
TEST_CASE("A prepared product leaves the OpenMP thread count as it found it",
          "[prepared][threads]") {
    // A product below kSerialProductMacs runs oneDNN on one thread (the count set for the call);
    // the caller's count comes back after it, small product or large.
    const detail::OmpCalls& omp = detail::omp_calls();
    if (!kPrepares || !omp.set_num_threads) return;
    const int saved = omp.get_max_threads();
    omp.set_num_threads(2);
    std::mt19937_64 rng(17);
    for (const Index N : {Index{3}, Index{128}}) {
        CAPTURE(N);
        const Tensor<float> W = Tensor<float>::randn({384, 384}, rng);  // 128 rows: 18.9 M
        const Tensor<float> X = Tensor<float>::randn({N, 384}, rng);
        Tensor<float> Y(Shape{N, 384});
        const auto prepared = ops::PreparedMatrix::make(W.data(), 384, 384, 384);
        REQUIRE(prepared != nullptr);
        prepared->forward(X.matrix(), nullptr, Y.matrix());
        CHECK(omp.get_max_threads() == 2);
    }
    omp.set_num_threads(saved);
}
#endif

}  // namespace test_prepared_weights
