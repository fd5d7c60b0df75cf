// SPDX-License-Identifier: MIT
// The bf16 GEMM libraries available on this machine against OpenBLAS's float sgemm, one thread:
// oneDNN's bf16 matmul (f32 destination), libxsmm's bsmm kernels (bf16 in, f32 out), and the
// portable path of ops/gemm_bf16.hpp (widen bf16 to float, then sgemm). Not part of the build
// (it needs oneDNN, libxsmm and OpenBLAS at once); build and run it by hand:
//   g++ -O2 -std=c++17 bench/experiments/bf16_candidates.cpp -o /tmp/bf16_candidates
//       -lopenblas -ldnnl /usr/lib/libxsmm.a -lopenblas -lpthread -ldl   (one command)
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/bf16_candidates
// Prints GFLOP/s per shape; a library that has no bf16 kernel on this CPU prints why.
#include <cblas.h>
#include <libxsmm.h>
#include <dnnl.hpp>

#include <algorithm>   // std::min
#include <chrono>      // std::chrono::steady_clock
#include <cstdint>     // std::uint16_t, std::uint32_t
#include <cstdio>      // std::printf
#include <cstring>     // std::memcpy
#include <functional>  // std::function
#include <string>      // std::string
#include <vector>      // std::vector

namespace {

std::uint16_t to_bf16(float f) {  // round to nearest even (no NaN in these operands)
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
}

float from_bf16(std::uint16_t h) {
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f = 0;
    std::memcpy(&f, &u, 4);
    return f;
}

/// Best of 5 rounds of the mean time per call over >= 0.2 s, in seconds.
double seconds_per_call(const std::function<void()>& f) {
    f();
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
        const auto t0 = std::chrono::steady_clock::now();
        int calls = 0;
        double elapsed = 0;
        do {
            f();
            ++calls;
            elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } while (elapsed < 0.2);
        best = std::min(best, elapsed / calls);
    }
    return best;
}

}  // namespace

int main() {
    // C[M, N] = A[M, K] B[K, N]: the fused QKV projection of MHA (8, 128, 512, 8), its out
    // projection, the two attention products of one (batch, head) slice, a decode step's row.
    const int shapes[][3] = {
        {1024, 1536, 512}, {1024, 512, 512}, {128, 128, 64}, {128, 64, 128}, {1, 1536, 512}};
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    std::printf("%-16s %8s %10s %12s %12s\n", "M x N x K", "sgemm", "portable", "oneDNN bf16",
                "libxsmm bf16");
    for (const auto& sh : shapes) {
        const int M = sh[0], N = sh[1], K = sh[2];
        const double flops = 2.0 * M * N * K;
        std::vector<float> A(static_cast<std::size_t>(M) * K), B(static_cast<std::size_t>(K) * N),
            C(static_cast<std::size_t>(M) * N);
        for (std::size_t i = 0; i < A.size(); ++i)
            A[i] = static_cast<float>(i * 7 % 13) / 13.f - .5f;
        for (std::size_t i = 0; i < B.size(); ++i)
            B[i] = static_cast<float>(i * 5 % 11) / 11.f - .5f;
        std::vector<std::uint16_t> Ah(A.size()), Bh(B.size());
        for (std::size_t i = 0; i < A.size(); ++i) Ah[i] = to_bf16(A[i]);
        for (std::size_t i = 0; i < B.size(); ++i) Bh[i] = to_bf16(B[i]);

        const double sgemm = seconds_per_call([&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, A.data(), K,
                        B.data(), N, 0.f, C.data(), N);
        });
        std::vector<float> Af(A.size()), Bf(B.size());
        const double portable = seconds_per_call([&] {
            for (std::size_t i = 0; i < Ah.size(); ++i) Af[i] = from_bf16(Ah[i]);
            for (std::size_t i = 0; i < Bh.size(); ++i) Bf[i] = from_bf16(Bh[i]);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, Af.data(), K,
                        Bf.data(), N, 0.f, C.data(), N);
        });

        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        std::string onednn;
        try {
            const dnnl::memory::desc a_md({M, K}, dt::bf16, tag::ab),
                b_md({K, N}, dt::bf16, tag::ab), c_md({M, N}, dt::f32, tag::ab);
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
            const dnnl::matmul mm(pd);
            dnnl::memory am(a_md, engine, Ah.data()), bm(b_md, engine, Bh.data()),
                cm(c_md, engine, C.data());
            const double t = seconds_per_call([&] {
                mm.execute(stream,
                           {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
                stream.wait();
            });
            onednn = std::to_string(flops / t * 1e-9) + " (" + pd.impl_info_str() + ")";
        } catch (const dnnl::error& e) {
            onednn = std::string("none: ") + e.what();
        }

        // libxsmm is column-major: C^T [N, M] = B^T [N, K] A^T [K, M].
        const float alpha = 1, beta = 0;
        const int flags = LIBXSMM_GEMM_FLAGS('N', 'N');
        const libxsmm_bsmmfunction kernel =
            libxsmm_bsmmdispatch(N, M, K, &N, &K, &N, &alpha, &beta, &flags, nullptr);
        std::string xsmm = "none: no kernel for this CPU";
        if (kernel) {
            const double t = seconds_per_call([&] {
                kernel(reinterpret_cast<const libxsmm_bfloat16*>(Bh.data()),
                       reinterpret_cast<const libxsmm_bfloat16*>(Ah.data()), C.data());
            });
            xsmm = std::to_string(flops / t * 1e-9);
        }
        std::printf("%4d x %4d x %4d %8.1f %10.1f   %s   %s\n", M, N, K, flops / sgemm * 1e-9,
                    flops / portable * 1e-9, onednn.c_str(), xsmm.c_str());
    }
}
