// SPDX-License-Identifier: MIT
// Incremental decoding with a KV cache: one token's step at a given cache length, against
// recomputing the whole prefix with forward, for full, grouped-query and multi-query heads.
//
// Cases (float, B = 1, E = 512, H = 8, self-attention, eval mode):
//   decode_step/<projection>/float/B:_/cache:_/E:_/H:_/Hkv:_
//       decode_into() of one new token onto a cache holding `cache` tokens; the cache is
//       truncated back after every step, so each iteration sees the same length. Counters:
//       tokens/s (items_per_second) and cache_MiB (the K and V memory at that length's capacity).
//   recompute_prefix/<projection>/float/B:_/cache:_/E:_/H:_/Hkv:_
//       what producing the same token costs without a cache: forward of all cache + 1 tokens
//       with is_causal, in eval mode (every query row, though only the last is new).
// `bench/run.py attention` times the layer's decode step against torch's SDPA step on a
// preallocated cache. Timing is by CPU time, single-threaded (see bench_mha.cpp); ratios are
// meaningful within one run only:
//
//   build/release/bench/bench_decode --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized through Eigen (GCC bug 105593);
// see bench_mha.cpp.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <benchmark/benchmark.h>

#include <cstdint>  // std::int64_t
#include <random>   // std::mt19937_64
#include <string>   // std::string

#include <headwise/headwise.hpp>

namespace {

using headwise::Index;
using headwise::Projection;

constexpr Index kB = 1, kE = 512, kH = 8;
constexpr Index kCacheLengths[] = {128, 256, 512, 1024, 2048, 4096};
constexpr Index kKvHeads[] = {8, 2, 1};  // H, H / 4, 1

headwise::MultiheadAttention<float> make_module(Projection p, Index Hkv) {
    headwise::MultiheadAttentionOptions o;
    o.embed_dim = kE;
    o.num_heads = kH;
    o.num_kv_heads = Hkv;
    o.projection = p;
    headwise::MultiheadAttention<float> m(o, 1);
    m.eval();
    return m;
}

void decode_step(benchmark::State& state, Projection p) {
    const Index B = state.range(0), n = state.range(1), Hkv = state.range(4);
    headwise::MultiheadAttention<float> m = make_module(p, Hkv);
    std::mt19937_64 rng(7);
    const auto prefix = headwise::Tensor<float>::randn(headwise::Shape{B, n, kE}, rng);
    const auto token = headwise::Tensor<float>::randn(headwise::Shape{B, 1, kE}, rng);
    headwise::KVCache<float> cache = m.make_kv_cache(B, n + 1);
    (void)m.decode(prefix, cache);  // fill the cache in one chunk
    headwise::Tensor<float> y(headwise::Shape{B, 1, kE});
    for (auto _ : state) {
        m.decode_into(token, cache, y);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
        cache.truncate(n);  // O(1): forget the token again
    }
    state.SetItemsProcessed(state.iterations() * B);
    state.counters["cache_MiB"] = static_cast<double>(cache.memory_bytes()) / (1 << 20);
}

void recompute_prefix(benchmark::State& state, Projection p) {
    const Index B = state.range(0), n = state.range(1), Hkv = state.range(4);
    headwise::MultiheadAttention<float> m = make_module(p, Hkv);
    std::mt19937_64 rng(7);
    const auto x = headwise::Tensor<float>::randn(headwise::Shape{B, n + 1, kE}, rng);
    headwise::AttentionMasks<float> masks;
    masks.is_causal = true;
    for (auto _ : state) {
        auto f = m.forward(x, x, x, masks);
        benchmark::DoNotOptimize(f.output.data());
    }
    state.SetItemsProcessed(state.iterations() * B);
}

void register_all() {
    const char* names[] = {"B", "cache", "E", "H", "Hkv"};
    for (Projection p : {Projection::fused, Projection::separate, Projection::per_head}) {
        const std::string proj = headwise::to_string(p);
        auto* step = benchmark::RegisterBenchmark(("decode_step/" + proj + "/float").c_str(),
                                                  decode_step, p);
        step->ArgNames({names[0], names[1], names[2], names[3], names[4]})
            ->Unit(benchmark::kMicrosecond);
        for (Index n : kCacheLengths)
            for (Index Hkv : kKvHeads)
                if (Hkv == kH || p == Projection::fused)  // the GQA sweep on fused only
                    step->Args({kB, n, kE, kH, Hkv});
        if (p != Projection::fused) continue;
        auto* full = benchmark::RegisterBenchmark(("recompute_prefix/" + proj + "/float").c_str(),
                                                  recompute_prefix, p);
        full->ArgNames({names[0], names[1], names[2], names[3], names[4]})
            ->Unit(benchmark::kMillisecond);
        for (Index n : kCacheLengths) full->Args({kB, n, kE, kH, kH});
    }
}

}  // namespace

int main(int argc, char** argv) {
    register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
