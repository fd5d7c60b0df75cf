// SPDX-License-Identifier: MIT
// The MultiheadAttention options of a golden case (tests/golden/mha, tests/golden/gqa): its
// meta.txt read once for every test that runs the cases.
#pragma once

#include <string>  // std::stod

#include <headwise/layers/attention/options.hpp>

#include "golden.hpp"

namespace headwise::test {

/// The options torch's module had for case `c`, with `projection`; dropout 0. num_kv_heads and
/// scale are read where the case has them (the grouped-query cases).
inline MultiheadAttentionOptions golden_attention_options(
    const GoldenCase& c, Projection projection,
    AttentionKernel kernel = AttentionKernel::automatic) {
    MultiheadAttentionOptions opt;
    opt.attention_kernel = kernel;
    opt.embed_dim = c.meta_int("embed_dim");
    opt.num_heads = c.meta_int("num_heads");
    if (c.meta.count("num_kv_heads")) opt.num_kv_heads = c.meta_int("num_kv_heads");
    opt.projection = projection;
    opt.bias = c.flag("bias");
    opt.kdim = c.meta_int("kdim");
    opt.vdim = c.meta_int("vdim");
    opt.add_bias_kv = c.flag("add_bias_kv");
    opt.add_zero_attn = c.flag("add_zero_attn");
    if (c.meta.count("scale")) opt.scale = std::stod(c.meta.at("scale"));
    opt.dropout = 0.0;
    return opt;
}

}  // namespace headwise::test
