// SPDX-License-Identifier: MIT
// Precision::bf16 beside float: MultiheadAttention inference and training step, encoder layer
// inference, Linear::forward, and the bf16 product itself (ops::gemm_bf16) beside
// ops::gemm<float>, at the same shapes.
//
// Cases (A in float, then bf16, at each shape; run with --benchmark_enable_random_interleaving
// and repetitions to interleave them):
//   BM_MhaInference/precision:0|1   forward in eval mode, self-attention, (B, L, E, H), fused
//   BM_EncoderLayerInference/precision:0|1  TransformerEncoderLayer forward in eval mode,
//                                   (B, L, E, H), feed-forward width 4 E (MiniLM's), post-norm,
//                                   GELU
//   BM_MhaTrainStep/precision:0|1   forward in training mode and backward (every input gradient
//                                   combined, parameter gradients added), self-attention, fused;
//                                   bf16 is mixed precision (float master weights and gradients)
//   BM_DecodeStep/precision:0|1     decode_into of one token over a cache of `held` tokens; in
//                                   bf16 both the module and the cache are bf16
//   BM_LinearForward/precision:0|1  Linear<float>::forward_into, [N, in] -> [N, out], with bias
//   BM_Gemm/precision:0|1           C[m, n] = A[m, k] B[n, k]^T: ops::gemm<float> or
//                                   ops::gemm_bf16 on bf16 copies of the operands
// FLOP/s counts the multiply-adds of the products (2 m n k; for MHA the four products).

#include <benchmark/benchmark.h>

#include <random>  // std::mt19937_64
#include <vector>  // std::vector

#include <headwise/bf16.hpp>
#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>
#include <headwise/ops/gemm.hpp>
#include <headwise/ops/gemm_bf16.hpp>
#include <headwise/precision.hpp>
#include <headwise/tensor.hpp>

namespace {

using headwise::Index;
using headwise::Precision;
using headwise::Shape;
using headwise::Tensor;

Precision precision_of(const benchmark::State& state, int arg) {
    return state.range(arg) ? Precision::bf16 : Precision::float32;
}

void set_flops(benchmark::State& state, double flops) {
    state.counters["FLOP/s"] =
        benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MhaInference(benchmark::State& state) {
    const Index B = state.range(0), L = state.range(1), E = state.range(2), H = state.range(3);
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = E;
    opt.num_heads = H;
    headwise::MultiheadAttention<float> mha(opt, 1);
    mha.eval();
    mha.with_precision(precision_of(state, 4));
    std::mt19937_64 rng(7);
    const Tensor<float> x = Tensor<float>::randn(Shape{B, L, E}, rng);
    for (auto _ : state) {
        auto y = mha.forward(x, x, x);
        benchmark::DoNotOptimize(y.output.data());
    }
    const double b = static_cast<double>(B), l = static_cast<double>(L), e = static_cast<double>(E);
    set_flops(state, 2 * b * l * e * (4 * e) + 2 * 2 * b * l * l * e);
}

void BM_EncoderLayerInference(benchmark::State& state) {
    const Index B = state.range(0), L = state.range(1), E = state.range(2), H = state.range(3);
    headwise::TransformerEncoderLayerOptions opt;
    opt.d_model = E;
    opt.nhead = H;
    opt.dim_feedforward = 4 * E;
    opt.activation = headwise::Activation::gelu;
    headwise::TransformerEncoderLayer<float> layer(opt, 1);
    layer.eval();
    layer.with_precision(precision_of(state, 4));
    std::mt19937_64 rng(7);
    const Tensor<float> x = Tensor<float>::randn(Shape{B, L, E}, rng);
    for (auto _ : state) {
        auto y = layer.forward(x);
        benchmark::DoNotOptimize(y.output.data());
    }
    const double b = static_cast<double>(B), l = static_cast<double>(L), e = static_cast<double>(E);
    // attention (four projections, two attention products) and the feed-forward (2 x E x 4E)
    set_flops(state, 2 * b * l * e * (4 * e) + 2 * 2 * b * l * l * e + 2 * b * l * e * (8 * e));
}

void BM_MhaTrainStep(benchmark::State& state) {
    const Index B = state.range(0), L = state.range(1), E = state.range(2), H = state.range(3);
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = E;
    opt.num_heads = H;
    headwise::MultiheadAttention<float> mha(opt, 1);
    mha.with_precision(precision_of(state, 4));
    std::mt19937_64 rng(7);
    const Tensor<float> x = Tensor<float>::randn(Shape{B, L, E}, rng);
    const Tensor<float> dy = Tensor<float>::randn(Shape{B, L, E}, rng);
    headwise::AttentionBackwardOptions bo;
    bo.combine_self = true;
    for (auto _ : state) {
        auto fwd = mha.forward(x, x, x);
        auto g = mha.backward(fwd, dy, bo);
        benchmark::DoNotOptimize(g.input.data());
    }
    // forward's four products, and twice as many in backward
    const double b = static_cast<double>(B), l = static_cast<double>(L), e = static_cast<double>(E);
    set_flops(state, 3 * (2 * b * l * e * (4 * e) + 2 * 2 * b * l * l * e));
}

void BM_DecodeStep(benchmark::State& state) {
    // One new token per sequence over a cache already holding `held` tokens, (B, E, H).
    const Index B = state.range(0), held = state.range(1), E = state.range(2), H = state.range(3);
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = E;
    opt.num_heads = H;
    headwise::MultiheadAttention<float> mha(opt, 1);
    mha.eval();
    const Precision precision = precision_of(state, 4);
    mha.with_precision(precision);
    auto cache = mha.make_kv_cache(B, held + 1, precision);
    std::mt19937_64 rng(7);
    const Tensor<float> prompt = Tensor<float>::randn(Shape{B, held, E}, rng);
    mha.decode(prompt, cache);
    const Tensor<float> x = Tensor<float>::randn(Shape{B, 1, E}, rng);
    Tensor<float> y(Shape{B, 1, E});
    for (auto _ : state) {
        cache.truncate(held);
        mha.decode_into(x, cache, y);
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["cache_bytes"] = static_cast<double>(cache.memory_bytes());
}

void BM_LinearForward(benchmark::State& state) {
    const Index N = state.range(0), in = state.range(1), out = state.range(2);
    std::mt19937_64 rng(7);
    headwise::Linear<float> layer(in, out, true, rng);
    layer.with_precision(precision_of(state, 3));
    const Tensor<float> x = Tensor<float>::randn(Shape{N, in}, rng);
    Tensor<float> y(Shape{N, out});
    for (auto _ : state) {
        layer.forward_into(x, y);
        benchmark::DoNotOptimize(y.data());
    }
    set_flops(state, 2.0 * static_cast<double>(N * in) * static_cast<double>(out));
}

void BM_Gemm(benchmark::State& state) {
    const Index m = state.range(0), n = state.range(1), k = state.range(2);
    std::mt19937_64 rng(7);
    const Tensor<float> A = Tensor<float>::randn(Shape{m, k}, rng);
    const Tensor<float> Bm = Tensor<float>::randn(Shape{n, k}, rng);
    std::vector<headwise::BFloat16> a(static_cast<std::size_t>(m * k)),
        b(static_cast<std::size_t>(n * k));
    headwise::to_bf16(A.data(), a.data(), m * k);
    headwise::to_bf16(Bm.data(), b.data(), n * k);
    std::vector<float> workspace(
        static_cast<std::size_t>(headwise::ops::gemm_bf16_workspace(m, k, n, k)));
    Tensor<float> C(Shape{m, n});
    const bool bf16 = precision_of(state, 3) == Precision::bf16;
    for (auto _ : state) {
        if (bf16)
            headwise::ops::gemm_bf16(
                1.0f, headwise::ops::ConstBf16Matrix(a.data(), m, k), headwise::ops::Op::none,
                headwise::ops::ConstBf16Matrix(b.data(), n, k), headwise::ops::Op::transpose, 0.0f,
                C.matrix(), workspace.data());
        else
            headwise::ops::gemm<float>(1.0f, A.matrix(), headwise::ops::Op::none, Bm.matrix(),
                                       headwise::ops::Op::transpose, 0.0f, C.matrix());
        benchmark::DoNotOptimize(C.data());
    }
    set_flops(state, 2.0 * static_cast<double>(m * n) * static_cast<double>(k));
}

BENCHMARK(BM_MhaInference)
    ->ArgNames({"B", "L", "E", "H", "precision"})
    ->Args({8, 128, 512, 8, 0})
    ->Args({8, 128, 512, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_EncoderLayerInference)
    ->ArgNames({"B", "L", "E", "H", "precision"})
    ->Args({32, 128, 384, 12, 0})
    ->Args({32, 128, 384, 12, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MhaTrainStep)
    ->ArgNames({"B", "L", "E", "H", "precision"})
    ->Args({8, 128, 512, 8, 0})
    ->Args({8, 128, 512, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"B", "held", "E", "H", "precision"})
    ->Args({1, 4096, 512, 8, 0})
    ->Args({1, 4096, 512, 8, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_LinearForward)
    ->ArgNames({"N", "in", "out", "precision"})
    ->Args({1024, 512, 1536, 0})
    ->Args({1024, 512, 1536, 1})
    ->Args({1, 512, 1536, 0})
    ->Args({1, 512, 1536, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Gemm)
    ->ArgNames({"m", "n", "k", "precision"})
    ->Args({1024, 1536, 512, 0})
    ->Args({1024, 1536, 512, 1})
    ->Args({128, 128, 64, 0})
    ->Args({128, 128, 64, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
