// SPDX-License-Identifier: MIT
// Exact (erf) GELU forward and backward in float over an FFN activation, against Φ in double.
//
// Cases, over x[n] with n = 4096 x 1536 (32 sequences of 128 tokens through a 1536-wide FFN;
// values from N(0, 1.5²), as a pre-activation):
//   BM_GeluForward             ops::gelu_forward<float>, GeluApproximation::none
//   BM_GeluBackward            ops::gelu_backward<float>, GeluApproximation::none
//   BM_GeluForwardDoublePhi    the same through detail::normal_cdf_fast (Φ in double from three
//                              ranges, relative error 1e-11): the kernel float used before
//   BM_GeluBackwardDoublePhi   likewise with detail::exp_nonpositive for the density
// Items/s counts elements. Single-threaded; times are wall-clock (UseRealTime). Run with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N for a ratio.

#include <benchmark/benchmark.h>

#include <random>  // std::mt19937_64, std::normal_distribution
#include <vector>

#include <headwise/ops/activation.hpp>
#include <headwise/ops/detail/fast_erf.hpp>

namespace {

using headwise::Index;
namespace ops = headwise::ops;
namespace detail = headwise::detail;

constexpr Index kN = Index{4096} * 1536;

std::vector<float> inputs() {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> dist(0.0f, 1.5f);
    std::vector<float> x(static_cast<std::size_t>(kN));
    for (float& v : x) v = dist(rng);
    return x;
}

void finish(benchmark::State& state) {
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * kN);
}

void BM_GeluForward(benchmark::State& state) {
    const std::vector<float> x = inputs();
    std::vector<float> y(x.size());
    for (auto _ : state) {
        ops::gelu_forward(x.data(), kN, ops::GeluApproximation::none, y.data());
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    finish(state);
}

void BM_GeluBackward(benchmark::State& state) {
    const std::vector<float> x = inputs();
    const std::vector<float> dy(x.size(), 1.0f);
    std::vector<float> dx(x.size(), 0.0f);
    for (auto _ : state) {
        ops::gelu_backward(x.data(), dy.data(), kN, ops::GeluApproximation::none, dx.data());
        benchmark::DoNotOptimize(dx.data());
        benchmark::ClobberMemory();
    }
    finish(state);
}

void BM_GeluForwardDoublePhi(benchmark::State& state) {
    const std::vector<float> x = inputs();
    std::vector<float> y(x.size());
    for (auto _ : state) {
        for (Index i = 0; i < kN; ++i) {
            const double v = static_cast<double>(x[static_cast<std::size_t>(i)]);
            const double cdf = detail::normal_cdf_fast(v);
            y[static_cast<std::size_t>(i)] =
                static_cast<float>(detail::pick(cdf == 0.0, 0.0, v * cdf));
        }
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    finish(state);
}

void BM_GeluBackwardDoublePhi(benchmark::State& state) {
    constexpr double kInvSqrtTwoPi = 0.39894228040143267794;
    const std::vector<float> x = inputs();
    const std::vector<float> dy(x.size(), 1.0f);
    std::vector<float> dx(x.size(), 0.0f);
    for (auto _ : state) {
        for (Index i = 0; i < kN; ++i) {
            const auto k = static_cast<std::size_t>(i);
            const double v = static_cast<double>(x[k]);
            const double cdf = detail::normal_cdf_fast(v);
            const double pdf = kInvSqrtTwoPi * detail::exp_nonpositive(-0.5 * v * v);
            const double d = detail::pick(pdf == 0.0, cdf, cdf + v * pdf);
            dx[k] += static_cast<float>(static_cast<double>(dy[k]) * d);
        }
        benchmark::DoNotOptimize(dx.data());
        benchmark::ClobberMemory();
    }
    finish(state);
}

}  // namespace

BENCHMARK(BM_GeluForward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GeluForwardDoublePhi)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GeluBackwardDoublePhi)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
