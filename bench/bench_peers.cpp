// SPDX-License-Identifier: MIT
// MultiheadAttention on weights and inputs given as .npy files: the headwise worker of
// bench/run.py's attention suite, timed side by side with PyTorch 2.x and ONNX Runtime.
//
//   bench_peers worker <threads>
//       answers bench/worker_process.hpp's protocol; a case is
//         setup <id> <kind> <dir> <B> <L> <E> <H> <causal> <cache> <out>
//             kind infer: module.eval(), y = forward(x, x, x)             (x [B, L, E])
//                  train: module.train(), forward, then backward of sum(y * dy), the gradient
//                         of x once (combine_self), parameter gradients added
//                  decode: one token x [1, 1, E] decoded onto a KV cache holding the `cache`
//                         tokens of prefix [1, cache, E], then truncated back (bench_decode's
//                         decode_step)
//             weights <dir>/weights/*.npy under torch's state_dict() names, inputs <dir>/x.npy,
//             <dir>/dy.npy, <dir>/prefix.npy; writes y (and dx for train) of the warm-up call to
//             <out>.y.npy (<out>.dx.npy)
//   bench_peers --benchmark_list_tests=true   (the build's check that the program starts)
//
// HEADWISE_BENCH_TILES=<rows>x<cols> sets the blocked kernel's tiles (AttentionTiles).
//
// Threads: OpenBLAS's own, and OpenMP's in an OpenMP build. Time is wall time, as the peers'.

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized through Eigen (GCC bug 105593);
// see bench_mha.cpp.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <headwise/detail/parallel.hpp>  // HEADWISE_PARALLEL, <omp.h> when set
#include <headwise/headwise.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/ops/gemm.hpp>  // HEADWISE_GEMM_CBLAS, <cblas.h> when set

#include "worker_process.hpp"  // serve, WorkerCase

#include <cstdio>   // std::printf
#include <cstdlib>  // std::atoi, std::getenv
#include <memory>   // std::unique_ptr
#include <sstream>  // std::istringstream
#include <string>   // std::string

namespace {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;

/// One case: a module on the given weights, its inputs, and what a call leaves behind.
struct Case : headwise_bench::WorkerCase {
    std::string kind;
    Index cache = 0;
    std::unique_ptr<headwise::MultiheadAttention<float>> mha;
    headwise::AttentionMasks<float> masks;
    Tensor<float> x, dy, y;
    std::unique_ptr<headwise::KVCache<float>> kv;
    Tensor<float> dx;

    void call() override {
        if (kind == "infer") {
            y = mha->forward(x, x, x, masks).output;
        } else if (kind == "train") {
            headwise::AttentionBackwardOptions bo;
            bo.combine_self = true;
            auto fwd = mha->forward(x, x, x, masks);
            dx = mha->backward(fwd, dy, bo).input;
            y = std::move(fwd.output);
        } else {
            mha->decode_into(x, *kv, y);
            kv->truncate(cache);
        }
    }

    void release_outputs() override {
        if (kind != "decode") y = Tensor<float>();  // decode writes into y
        dx = Tensor<float>();
    }
};

std::unique_ptr<headwise_bench::WorkerCase> setup(std::istringstream& in) {
    std::string dir, out;
    Index B = 0, L = 0, E = 0, H = 0, causal = 0;
    auto c = std::make_unique<Case>();
    in >> c->kind >> dir >> B >> L >> E >> H >> causal >> c->cache >> out;
    headwise::MultiheadAttentionOptions o;
    o.embed_dim = E;
    o.num_heads = H;
    o.projection = headwise::Projection::fused;
    o.reference_inputs = true;  // x outlives every call, as in bench_mha
    // HEADWISE_BENCH_TILES=<rows>x<cols>: the blocked kernel's tiles, for a tile sweep.
    if (const char* tiles = std::getenv("HEADWISE_BENCH_TILES")) {
        std::istringstream t(tiles);
        char x = 0;
        t >> o.attention_tiles.rows >> x >> o.attention_tiles.cols;
    }
    c->mha = std::make_unique<headwise::MultiheadAttention<float>>(o, 42);
    c->mha->load_state_dict(headwise::load_npy_dict<float>(dir + "/weights"));
    c->masks.is_causal = causal != 0;
    c->x = headwise::load_npy<float>(dir + "/x.npy");
    if (c->kind == "train") {
        c->mha->train();
        c->dy = headwise::load_npy<float>(dir + "/dy.npy");
    } else {
        c->mha->eval();
    }
    if (c->kind == "decode") {
        const Tensor<float> prefix = headwise::load_npy<float>(dir + "/prefix.npy");
        c->kv = std::make_unique<headwise::KVCache<float>>(c->mha->make_kv_cache(1, c->cache + 1));
        (void)c->mha->decode(prefix, *c->kv);  // fill the cache in one chunk
        c->y = Tensor<float>(Shape{1, 1, E});
    }
    static_cast<void>(B);
    static_cast<void>(L);
    c->call();  // the outputs the engines are compared on; serve() times its own first call
    headwise::save_npy(out + ".y.npy", c->y);
    if (c->kind == "train") headwise::save_npy(out + ".dx.npy", c->dx);
    return c;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode.rfind("--benchmark_list_tests", 0) == 0) {
        std::printf("peers/worker\n");
        return 0;
    }
    try {
        if (mode == "worker" && argc == 3) return headwise_bench::serve(std::atoi(argv[2]), setup);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_peers: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr,
                 "usage: bench_peers worker <threads>   (driven by bench/run.py attention)\n");
    return 2;
}
