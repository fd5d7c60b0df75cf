// SPDX-License-Identifier: MIT
// The float products of all-MiniLM-L6-v2's encoder (6 layers x [query/key/value 384 -> 1152,
// attention output 384 -> 384, intermediate 384 -> 1536, output 1536 -> 384], each layer with
// weights of its own, 42.5 MB in all, so that they stream from memory as in the model) for
// M tokens, one thread, by the float GEMMs available on this machine:
//   openblas X W^T   cblas_sgemm on the weight as stored, [out, in]: what headwise runs;
//                    OpenBLAS packs (copies) each weight on every call
//   openblas X Wt    the same with the weight transposed once, [in, out]
//   onednn packed    oneDNN's matmul with the weight reordered once into the layout the
//                    primitive asks for (format_tag::any): no copy per call
// Not part of the build (it needs OpenBLAS and oneDNN at once); build and run it by hand:
//   g++ -O2 -std=c++17 bench/experiments/minilm_gemm_candidates.cpp -o /tmp/minilm_gemm_candidates
//       -I/usr/include/x86_64-linux-gnu -lopenblas -ldnnl   (one command)
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/minilm_gemm_candidates [M ...]
// M defaults to 12 (a 12-token query), 128 and 4096 (batch 32 x 128). Prints, per M, the
// median time of the 24 products (one encoder call's) over the rounds, and GFLOP/s; the
// candidates run interleaved, round by round.
#include <cblas.h>
#include <dnnl.hpp>

#include <algorithm>   // std::sort, std::max
#include <chrono>      // std::chrono::steady_clock
#include <cmath>       // std::fabs
#include <cstdio>      // std::printf
#include <cstdlib>     // std::atoi
#include <functional>  // std::function
#include <random>      // std::mt19937, std::normal_distribution
#include <string>      // std::string
#include <vector>      // std::vector

namespace {

struct Product {
    int in = 0, out = 0;
    std::vector<float> w;   // [out, in], as a Linear holds it
    std::vector<float> wt;  // [in, out]
    dnnl::matmul matmul;
    dnnl::memory packed;  // wt reordered into the primitive's layout
    dnnl::memory::desc src, dst;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> tokens;
    for (int i = 1; i < argc; ++i) tokens.push_back(std::atoi(argv[i]));
    if (tokens.empty()) tokens = {12, 128, 4096};

    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;

    for (const int m : tokens) {
        std::vector<Product> products;
        for (int layer = 0; layer < 6; ++layer) {
            for (const auto& [in, out] :
                 {std::pair{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}}) {
                Product p;
                p.in = in;
                p.out = out;
                p.w.resize(static_cast<std::size_t>(in) * out);
                p.wt.resize(p.w.size());
                for (float& v : p.w) v = normal(rng);
                for (int o = 0; o < out; ++o)
                    for (int i = 0; i < in; ++i)
                        p.wt[static_cast<std::size_t>(i) * out + o] =
                            p.w[static_cast<std::size_t>(o) * in + i];
                p.src = dnnl::memory::desc({m, in}, dt::f32, tag::ab);
                p.dst = dnnl::memory::desc({m, out}, dt::f32, tag::ab);
                const dnnl::memory::desc any({in, out}, dt::f32, tag::any);
                const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, any, p.dst),
                                                      engine);
                dnnl::memory plain({{in, out}, dt::f32, tag::ab}, engine, p.wt.data());
                p.packed = dnnl::memory(pd.weights_desc(), engine);
                dnnl::reorder(plain, p.packed).execute(stream, plain, p.packed);
                stream.wait();
                p.matmul = dnnl::matmul(pd);
                products.push_back(std::move(p));
            }
        }
        std::vector<float> x(static_cast<std::size_t>(m) * 1536), y(x.size()), ref(x.size());
        for (float& v : x) v = normal(rng);

        const auto openblas_wt_stored = [&] {
            for (const Product& p : products)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, p.out, p.in, 1.0f, x.data(),
                            p.in, p.w.data(), p.in, 0.0f, y.data(), p.out);
        };
        const auto openblas_transposed = [&] {
            for (const Product& p : products)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, p.out, p.in, 1.0f,
                            x.data(), p.in, p.wt.data(), p.out, 0.0f, y.data(), p.out);
        };
        const auto onednn_packed = [&] {
            for (Product& p : products) {
                dnnl::memory src(p.src, engine, x.data()), dst(p.dst, engine, y.data());
                p.matmul.execute(
                    stream,
                    {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.packed}, {DNNL_ARG_DST, dst}});
            }
            stream.wait();
        };
        const std::vector<std::pair<std::string, std::function<void()>>> candidates = {
            {"openblas X W^T", openblas_wt_stored},
            {"openblas X Wt", openblas_transposed},
            {"onednn packed", onednn_packed}};

        // Every candidate computes the last product's y; compare with the first's.
        openblas_wt_stored();
        ref = y;
        for (const auto& c : candidates) {
            c.second();
            double diff = 0;
            for (std::size_t i = 0; i < y.size(); ++i)
                diff = std::max(diff, static_cast<double>(std::fabs(y[i] - ref[i])));
            if (diff > 1e-2) {
                std::printf("%s differs from openblas X W^T by %g\n", c.first.c_str(), diff);
                return 1;
            }
        }

        double flop = 0;
        for (const Product& p : products) flop += 2.0 * m * p.in * p.out;
        const int rounds = m >= 1024 ? 5 : 15, calls = m >= 1024 ? 1 : 20;
        std::vector<std::vector<double>> times(candidates.size());
        for (int r = 0; r < rounds; ++r) {
            for (std::size_t c = 0; c < candidates.size(); ++c) {
                const auto t0 = std::chrono::steady_clock::now();
                for (int k = 0; k < calls; ++k) candidates[c].second();
                times[c].push_back(
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                    calls);
            }
        }
        std::printf("M = %d tokens (%.2f GFLOP per encoder call):\n", m, flop / 1e9);
        for (std::size_t c = 0; c < candidates.size(); ++c) {
            const double t = median(times[c]);
            std::printf("  %-16s %9.3f ms  %6.1f GFLOP/s\n", candidates[c].first.c_str(), 1e3 * t,
                        flop / t / 1e9);
        }
    }
    return 0;
}
