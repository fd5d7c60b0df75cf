// SPDX-License-Identifier: MIT
// One forward and backward of MultiheadAttention<float>, included by both ODR translation units.
#pragma once

#include <headwise/headwise.hpp>

/// Instantiates the module, its forward and its backward in the including translation unit;
/// returns the number of output elements (8).
inline headwise::Index headwise_odr_attention_step() {
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 4;
    opt.num_heads = 2;
    headwise::MultiheadAttention<float> mha(opt, 1);
    const headwise::Tensor<float> q(headwise::Shape{1, 2, 4});  // [B, L, E]
    auto fwd = mha.forward(q, q, q);
    mha.backward(fwd, fwd.output);
    return fwd.output.numel();
}
