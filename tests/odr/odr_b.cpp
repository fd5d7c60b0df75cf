// SPDX-License-Identifier: MIT
// Second of two translation units that include the umbrella header (see main.cpp).
#include <headwise/headwise.hpp>

#include <cstddef>  // std::size_t

std::size_t headwise_odr_b() {
    // The same MultiheadAttention<float> instantiation in both translation units.
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 4;
    opt.num_heads = 2;
    headwise::MultiheadAttention<float> mha(opt, 1);
    const headwise::Tensor<float> q(headwise::Shape{1, 2, 4});  // [B, L, E]
    auto fwd = mha.forward(q, q, q);
    mha.backward(fwd, fwd.output);
    if (fwd.output.numel() != 8) return 0;
    headwise::Tensor<double> x(headwise::Shape{4, 5});  // [4, 5]
    headwise::Tensor<float> y(headwise::Shape{2, 3});   // [2, 3], the same instantiation as odr_a
    return static_cast<std::size_t>(x.numel() + y.numel());
}
