// SPDX-License-Identifier: MIT
// Linear<T>::forward against a bare Eigen GEMM of the same shape: the module should cost nothing.
//
// Cases, per scalar, for Y[N, out] = X[N, in] W[out, in]^T (+ b):
//   BM_EigenGemm              Y.noalias() = X * W.transpose() on preallocated RowMajor matrices,
//                             no bias: the floor
//   BM_EigenGemmBiasAfter     the GEMM, then Y.rowwise() += b (a second pass over Y)
//   BM_EigenGemmBiasFirst     Y.rowwise() = b, then Y.noalias() += X * W.transpose(): the bias
//                             replaces the zero fill Eigen's `=` product does anyway
//   BM_LinearForward          Linear<T>::forward(x): checks, allocates y, ops::linear_forward
//   BM_LinearForwardInto      Linear<T>::forward_into(x, y) into a buffer made before the loop
// FLOP/s counts the 2 N in out multiply-adds of the GEMM (the bias adds N out more, ignored).
// Single-threaded unless built with OpenMP; times are wall-clock (UseRealTime).

#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <random>  // std::mt19937_64

#include <headwise/layers/linear.hpp>
#include <headwise/tensor.hpp>

namespace {

using headwise::Index;
using headwise::RowMatrix;
using headwise::Shape;
using headwise::Tensor;

/// The problem of one case: rows of x, in_features, out_features.
struct Problem {
    Index N, in, out;
    explicit Problem(const benchmark::State& state)
        : N(static_cast<Index>(state.range(0))),
          in(static_cast<Index>(state.range(1))),
          out(static_cast<Index>(state.range(2))) {}
};

void set_flops(benchmark::State& state, const Problem& p) {
    state.counters["FLOP/s"] = benchmark::Counter(
        2.0 * static_cast<double>(p.N) * static_cast<double>(p.in) * static_cast<double>(p.out),
        benchmark::Counter::kIsIterationInvariantRate);
}

/// A [rows, cols] RowMatrix of standard normal draws (through Tensor::randn: no Eigen Random).
template <class T>
RowMatrix<T> random_matrix(Index rows, Index cols, std::mt19937_64& rng) {
    const Tensor<T> t = Tensor<T>::randn(Shape{rows, cols}, rng);
    return RowMatrix<T>(t.matrix());
}

/// The operands of the bare-GEMM cases, drawn before the timed loop.
template <class T>
struct GemmOperands {
    explicit GemmOperands(const Problem& p)
        : X(random_matrix<T>(p.N, p.in, rng_)),
          W(random_matrix<T>(p.out, p.in, rng_)),
          b(random_matrix<T>(1, p.out, rng_)),
          Y(p.N, p.out) {}

    std::mt19937_64 rng_{42};
    const RowMatrix<T> X;  // [N, in]
    const RowMatrix<T> W;  // [out, in]
    const RowMatrix<T> b;  // [1, out]
    RowMatrix<T> Y;        // [N, out]
};

template <class T>
void BM_EigenGemm(benchmark::State& state) {
    const Problem p(state);
    GemmOperands<T> g(p);
    for (auto _ : state) {
        g.Y.noalias() = g.X * g.W.transpose();
        benchmark::DoNotOptimize(g.Y.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, p);
}

template <class T>
void BM_EigenGemmBiasAfter(benchmark::State& state) {
    const Problem p(state);
    GemmOperands<T> g(p);
    for (auto _ : state) {
        g.Y.noalias() = g.X * g.W.transpose();
        g.Y.rowwise() += g.b.row(0);
        benchmark::DoNotOptimize(g.Y.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, p);
}

template <class T>
void BM_EigenGemmBiasFirst(benchmark::State& state) {
    const Problem p(state);
    GemmOperands<T> g(p);
    for (auto _ : state) {
        g.Y.rowwise() = g.b.row(0);
        g.Y.noalias() += g.X * g.W.transpose();
        benchmark::DoNotOptimize(g.Y.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, p);
}

template <class T>
void BM_LinearForward(benchmark::State& state) {
    const Problem p(state);
    std::mt19937_64 rng(42);
    const headwise::Linear<T> fc(p.in, p.out, /*bias=*/true, rng);
    const Tensor<T> x = Tensor<T>::randn(Shape{p.N, p.in}, rng);  // [N, in]
    for (auto _ : state) {
        Tensor<T> y = fc.forward(x);  // [N, out], allocated per call as a user's call does
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, p);
}

template <class T>
void BM_LinearForwardInto(benchmark::State& state) {
    const Problem p(state);
    std::mt19937_64 rng(42);
    const headwise::Linear<T> fc(p.in, p.out, /*bias=*/true, rng);
    const Tensor<T> x = Tensor<T>::randn(Shape{p.N, p.in}, rng);  // [N, in]
    Tensor<T> y(Shape{p.N, p.out});                               // [N, out]
    for (auto _ : state) {
        fc.forward_into(x, y);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_flops(state, p);
}

// x [1024, 512] through a 512 -> 1536 layer: the fused Q, K, V projection of 8 sequences of 128
// tokens with E = 512.
void shapes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"N", "in", "out"})
        ->Args({1024, 512, 1536})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(BM_EigenGemm, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_EigenGemmBiasAfter, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_EigenGemmBiasFirst, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearForward, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearForwardInto, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_EigenGemm, double)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_EigenGemmBiasAfter, double)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_EigenGemmBiasFirst, double)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearForward, double)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearForwardInto, double)->Apply(shapes);

BENCHMARK_MAIN();
