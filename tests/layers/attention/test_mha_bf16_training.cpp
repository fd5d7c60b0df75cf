// SPDX-License-Identifier: MIT
// Mixed-precision training of MultiheadAttention<float> in Precision::bf16: every projection's
// outputs and gradients against the float module's, the out-projection's forward and weight
// gradient against double products of the bf16-rounded operands, and the float master weights
// updated by an optimiser and rounded anew by the next forward (training, then evaluation).
#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/optim/sgd.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::ldexp
#include <random>     // std::mt19937_64
#include <string>     // std::string

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"
#include "support/relative_error.hpp"

namespace test_mha_bf16_training {

using headwise::Index;
using headwise::MultiheadAttention;
using headwise::Precision;
using headwise::Projection;
using headwise::round_to_bf16;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::test::kProjections;

using headwise::test::relative_error;
namespace {

constexpr double kOutputTolerance = 1e-2;    // bf16 against float, outputs (as inference)
constexpr double kGradientTolerance = 2e-2;  // bf16 against float, every gradient

Tensor<float> random_tensor(const Shape& shape, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Tensor<float> x(shape);
    for (float& v : x) v = u(rng);
    return x;
}

TensorView<float> parameter(MultiheadAttention<float>& m, const std::string& name, bool grad) {
    for (const auto& p : m.parameters())
        if (p.name == name) return grad ? p.grad : p.value;
    FAIL("no parameter " << name);
    return {};
}

}  // namespace

TEST_CASE("MultiheadAttention bf16 training: outputs and every gradient within tolerance of float",
          "[mha][bf16][training]") {
    const Projection projection = GENERATE(from_range(kProjections));
    const bool self = GENERATE(true, false);
    const bool bias_kv = GENERATE(false, true);
    CAPTURE(headwise::to_string(projection), self, bias_kv);
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 32;
    opt.num_heads = 4;
    opt.add_bias_kv = bias_kv;
    opt.projection = projection;
    MultiheadAttention<float> f32(opt, 11);
    std::mt19937_64 rng(3);
    // Non-zero biases, so that their gradients and uses are exercised.
    for (const auto& p : f32.parameters())
        if (p.name.find("bias") != std::string::npos)
            for (Index i = 0; i < p.value.numel(); ++i)
                p.value.data()[i] = 0.1f * std::uniform_real_distribution<float>(-1, 1)(rng);
    MultiheadAttention<float> bf16 = f32;
    bf16.with_precision(Precision::bf16);
    const Tensor<float> q = random_tensor(Shape{2, 6, 32}, rng);
    const Tensor<float> kv = random_tensor(Shape{2, 7, 32}, rng);
    const Tensor<float> dout = random_tensor(Shape{2, 6, 32}, rng);
    const TensorView<const float> k = self ? q.view() : kv.view(), v = k;

    const auto fwd_f = f32.forward(q, k, v);
    const auto fwd = bf16.forward(q, k, v);
    REQUIRE(fwd.differentiable());
    CHECK(relative_error(fwd.output, fwd_f.output) <= kOutputTolerance);
    headwise::AttentionBackwardOptions bo;
    bo.combine_self = self;
    const auto g_f = f32.backward(fwd_f, dout, bo);
    const auto g = bf16.backward(fwd, dout, bo);
    if (self) {
        CHECK(relative_error(g.input, g_f.input) <= kGradientTolerance);
    } else {
        CHECK(relative_error(g.query, g_f.query) <= kGradientTolerance);
        CHECK(relative_error(g.key, g_f.key) <= kGradientTolerance);
        CHECK(relative_error(g.value, g_f.value) <= kGradientTolerance);
    }
    const auto pf = f32.parameters();
    const auto pb = bf16.parameters();
    REQUIRE(pf.size() == pb.size());
    for (std::size_t i = 0; i < pf.size(); ++i) {
        CAPTURE(pf[i].name);
        CHECK(relative_error(pb[i].grad, pf[i].grad) <= kGradientTolerance);
    }
    // The out-projection's bias gradient is the float sum of the float dout: float's exactly.
    const TensorView<float> db = parameter(bf16, "out_proj.bias", true);
    const TensorView<float> db_f = parameter(f32, "out_proj.bias", true);
    CHECK(relative_error(db, db_f) == 0.0);
}

TEST_CASE(
    "MultiheadAttention bf16 training: the out-projection is the product of the rounded "
    "operands, forward and weight gradient",
    "[mha][bf16][training]") {
    // One key per query sequence and no biases: every probability is exactly 1, so the context
    // is the value projection V, and values and weights chosen on a grid of few bits make V exact
    // in bf16. The out-projection then reads known operands: out = ctx bf16(W_o)^T and
    // dW_o = bf16(dout)^T ctx, checked within float accumulation of the rounded products.
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(headwise::to_string(projection));
    const Index E = 8, B = 2, L = 3;
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = E;
    opt.num_heads = 2;
    opt.bias = false;
    opt.projection = projection;
    MultiheadAttention<float> mha(opt, 5);
    mha.with_precision(Precision::bf16);
    std::mt19937_64 rng(17);
    std::uniform_int_distribution<int> grid(-8, 8);
    const TensorView<float> w_in = mha.parameters()[0].value;  // [3E, E] (packed)
    REQUIRE(w_in.numel() == 3 * E * E);
    for (Index i = 2 * E * E; i < 3 * E * E; ++i)
        w_in.data()[i] = static_cast<float>(grid(rng)) / 8.0f;  // W_v
    Tensor<float> xv(Shape{B, 1, E});
    for (float& x : xv) x = static_cast<float>(grid(rng)) / 8.0f;
    const Tensor<float> q = random_tensor(Shape{B, L, E}, rng);
    const Tensor<float> xk = random_tensor(Shape{B, 1, E}, rng);
    const Tensor<float> dout = random_tensor(Shape{B, L, E}, rng);
    // V[b, e] = sum_j xv[b, j] W_v[e, j]: multiples of 1/64 below 8 in magnitude, exact.
    double V[B][E];
    for (Index b = 0; b < B; ++b)
        for (Index e = 0; e < E; ++e) {
            V[b][e] = 0;
            for (Index j = 0; j < E; ++j)
                V[b][e] +=
                    static_cast<double>(xv.data()[b * E + j]) * w_in.data()[(2 * E + e) * E + j];
            REQUIRE(static_cast<double>(round_to_bf16(static_cast<float>(V[b][e]))) == V[b][e]);
        }
    const float* w_out = parameter(mha, "out_proj.weight", false).data();  // [E, E]

    const auto fwd = mha.forward(q, xk, xv);
    const double eps = std::ldexp(1.0, -24);
    for (Index b = 0; b < B; ++b)
        for (Index l = 0; l < L; ++l)
            for (Index o = 0; o < E; ++o) {
                double expected = 0, magnitude = 0;
                for (Index e = 0; e < E; ++e) {
                    const double p = V[b][e] * round_to_bf16(w_out[o * E + e]);
                    expected += p;
                    magnitude += std::abs(p);
                }
                CAPTURE(b, l, o);
                CHECK(std::abs(fwd.output.data()[(b * L + l) * E + o] - expected) <=
                      static_cast<double>(E + 2) * eps * magnitude);
            }
    mha.backward(fwd, dout);
    const float* dw_out = parameter(mha, "out_proj.weight", true).data();
    for (Index o = 0; o < E; ++o)
        for (Index e = 0; e < E; ++e) {
            double expected = 0, magnitude = 0;
            for (Index n = 0; n < B * L; ++n) {
                const double p =
                    static_cast<double>(round_to_bf16(dout.data()[n * E + o])) * V[n / L][e];
                expected += p;
                magnitude += std::abs(p);
            }
            CAPTURE(o, e);
            CHECK(std::abs(dw_out[o * E + e] - expected) <=
                  static_cast<double>(B * L + 2) * eps * magnitude);
        }
}

TEST_CASE(
    "MultiheadAttention bf16 training: an SGD step changes the float master weights and "
    "the next forward, training or evaluation, multiplies by them",
    "[mha][bf16][training]") {
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(headwise::to_string(projection));
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 16;
    opt.num_heads = 2;
    opt.projection = projection;
    MultiheadAttention<float> mha(opt, 3);
    mha.with_precision(Precision::bf16);
    std::mt19937_64 rng(8);
    const Tensor<float> x = random_tensor(Shape{2, 5, 16}, rng);
    const Tensor<float> dout = random_tensor(Shape{2, 5, 16}, rng);
    const auto before = mha.state_dict();
    headwise::SGDOptions so;
    so.lr = 0.5;
    headwise::SGD<float> sgd(mha.parameters(), so);

    const auto fwd0 = mha.forward(x, x, x);
    mha.backward(fwd0, dout);
    sgd.step();
    for (const auto& p : mha.parameters()) {  // every float parameter takes its float step
        CAPTURE(p.name);
        const Tensor<float>& w0 = before.at(p.name);
        for (Index i = 0; i < p.value.numel(); ++i)
            REQUIRE(p.value.data()[i] == w0.data()[i] - 0.5f * p.grad.data()[i]);
    }

    // A module converted from the updated float weights: what both next forwards must give.
    MultiheadAttention<float> fresh = mha;
    fresh.with_precision(Precision::bf16);
    fresh.eval();
    const Tensor<float> expected = fresh.forward(x, x, x).output;
    CHECK(relative_error(expected, fwd0.output) > 1e-2);  // the step moved the output

    const auto fwd1 = mha.forward(x, x, x);  // training mode
    CHECK(relative_error(fwd1.output, expected) == 0.0);
    // A second step in training, then evaluation: the first evaluation call rounds the weights
    // as they are after it, not as the last training forward saw them.
    mha.backward(fwd1, dout);
    sgd.step();
    MultiheadAttention<float> fresh2 = mha;
    fresh2.with_precision(Precision::bf16);
    fresh2.eval();
    mha.eval();
    CHECK(relative_error(mha.forward(x, x, x).output, fresh2.forward(x, x, x).output) == 0.0);
    auto cache = mha.make_kv_cache(2, 8);
    auto cache2 = fresh2.make_kv_cache(2, 8);
    CHECK(relative_error(mha.decode(x, cache), fresh2.decode(x, cache2)) == 0.0);
}

}  // namespace test_mha_bf16_training
