// SPDX-License-Identifier: MIT
// A program outside headwise that includes the umbrella header, as a user would, and runs a GEMM
// through the backend it was built with (HEADWISE_EXPECTED_GEMM_BACKEND, when given, must match).
#include <headwise/headwise.hpp>

#include <cstring>   // std::strcmp
#include <iostream>  // std::cout, std::cerr
#include <random>    // std::mt19937_64

#define HEADWISE_CONSUMER_STRING(x) #x
#define HEADWISE_CONSUMER_EXPAND(x) HEADWISE_CONSUMER_STRING(x)
#if defined(HEADWISE_COMPILED)
#define HEADWISE_CONSUMER_COMPILED 1
#else
#define HEADWISE_CONSUMER_COMPILED 0
#endif

int main() {
    headwise::Tensor<float> x(headwise::Shape{2, 3});  // [2, 3], zero-filled
    std::cout << "headwise " << HEADWISE_VERSION_STRING << ": Tensor<float> " << x.shape() << " {";
    for (headwise::Index i = 0; i < x.numel(); ++i)
        std::cout << (i == 0 ? "" : ", ") << x.data()[i];
    std::cout << "}\n";
    if (x.numel() != 6) return 1;

    // [[1, 2], [3, 4]] [[5, 6], [7, 8]]^T = [[17, 23], [39, 53]], through headwise::ops::gemm.
    headwise::Tensor<double> a(headwise::Shape{2, 2});  // [2, 2]
    headwise::Tensor<double> b(headwise::Shape{2, 2});  // [2, 2]
    for (headwise::Index i = 0; i < 4; ++i) {
        a.data()[i] = static_cast<double>(i + 1);
        b.data()[i] = static_cast<double>(i + 5);
    }
    const headwise::Tensor<double> c = headwise::matmul(a, b, false, true);  // [2, 2]
    const double expected[4] = {17, 23, 39, 53};
    std::cout << "GEMM backend " << headwise::ops::gemm_backend() << ": a b^T = {";
    for (headwise::Index i = 0; i < 4; ++i) std::cout << (i == 0 ? "" : ", ") << c.data()[i];
    std::cout << "}\n";
    for (headwise::Index i = 0; i < 4; ++i)
        if (c.data()[i] != expected[i]) return 1;
#if defined(HEADWISE_EXPECTED_GEMM_BACKEND)
    const char* want = HEADWISE_CONSUMER_EXPAND(HEADWISE_EXPECTED_GEMM_BACKEND);
    if (std::strcmp(headwise::ops::gemm_backend(), want) != 0) {
        std::cerr << "expected the " << want << " GEMM backend\n";
        return 1;
    }
#endif

    // One attention layer, forward and backward: with headwise::compiled its members come from
    // that library (a missing instantiation fails the link), otherwise from this file.
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 8;
    opt.num_heads = 2;
    headwise::MultiheadAttention<float> mha(opt, /*seed=*/1);
    std::mt19937_64 rng(7);
    const auto q = headwise::Tensor<float>::randn(headwise::Shape{2, 3, 8}, rng);  // [B, L, E]
    const auto fwd = mha.forward(q, q, q);
    const auto grads = mha.backward(fwd, fwd.output);
    std::cout << "MultiheadAttention<float>: output " << fwd.output.shape() << ", grad "
              << grads.query.shape()
              << (HEADWISE_CONSUMER_COMPILED ? " (headwise::compiled)\n" : "\n");
    if (grads.query.numel() != q.numel()) return 1;
#if defined(HEADWISE_EXPECT_COMPILED) && !HEADWISE_CONSUMER_COMPILED
    std::cerr << "expected to be built against headwise::compiled (HEADWISE_COMPILED)\n";
    return 1;
#endif
    return 0;
}
