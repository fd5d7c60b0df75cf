// SPDX-License-Identifier: MIT
// Generating token by token with a KV cache: a random-weight grouped-query attention layer
// between a random embedding table and a random output head, greedy decoding after a prompt.
// Then it checks itself: one causal forward over the whole generated sequence must give the
// outputs the cache produced step by step. Exits 1 if it does not.
#include <headwise/headwise.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <cstdio>     // std::printf
#include <random>     // std::mt19937_64
#include <vector>     // std::vector

int main() {
    using headwise::Index;
    using headwise::Shape;
    using headwise::Tensor;

    const Index vocab = 64, E = 32, prompt_length = 5, new_tokens = 20;
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = E;
    opt.num_heads = 8;
    opt.num_kv_heads = 2;  // grouped-query: 4 query heads share each key/value head
    headwise::MultiheadAttention<float> layer(opt, /*seed=*/3);
    layer.eval();  // decode runs in eval mode

    std::mt19937_64 rng(11);
    const Tensor<float> embedding = Tensor<float>::randn(Shape{vocab, E}, rng);  // [V, E]
    const Tensor<float> head = Tensor<float>::randn(Shape{vocab, E}, rng);       // [V, E]
    auto embed = [&](Index token, Tensor<float>& x, Index t) {  // row t of x [1, T, E]
        for (Index e = 0; e < E; ++e) x(0, t, e) = embedding(token, e);
    };
    auto next_token = [&](const Tensor<float>& y, Index t) {  // argmax of y[0, t] W_head^T
        Index best = 0;
        float best_logit = 0;
        for (Index v = 0; v < vocab; ++v) {
            float logit = 0;
            for (Index e = 0; e < E; ++e) logit += y(0, t, e) * head(v, e);
            if (v == 0 || logit > best_logit) best = v, best_logit = logit;
        }
        return best;
    };

    // The cache holds every token the layer will see: prompt and generated ones.
    const Index total = prompt_length + new_tokens;
    headwise::KVCache<float> cache = layer.make_kv_cache(/*batch=*/1, /*capacity=*/total);
    std::printf("KV cache: %lld key/value heads of %lld features, %lld tokens, %zu bytes\n",
                static_cast<long long>(cache.num_kv_heads()),
                static_cast<long long>(cache.head_dim()), static_cast<long long>(total),
                cache.memory_bytes());

    std::vector<Index> tokens = {1, 7, 3, 3, 9};  // the prompt
    Tensor<float> inputs(Shape{1, total, E});     // every input row, for the check below
    Tensor<float> outputs(Shape{1, total, E});    // every output row decode produced
    auto keep = [&](const Tensor<float>& x, const Tensor<float>& y, Index first) {
        for (Index t = 0; t < x.size(1); ++t)
            for (Index e = 0; e < E; ++e) {
                inputs(0, first + t, e) = x(0, t, e);
                outputs(0, first + t, e) = y(0, t, e);
            }
    };

    // 1. The prompt in one chunk: its keys and values enter the cache.
    Tensor<float> prompt(Shape{1, prompt_length, E});
    for (Index t = 0; t < prompt_length; ++t) embed(tokens[static_cast<std::size_t>(t)], prompt, t);
    Tensor<float> y = layer.decode(prompt, cache);  // [1, prompt_length, E]
    keep(prompt, y, 0);
    Index token = next_token(y, prompt_length - 1);

    // 2. One token at a time: project it, append its key and value, attend over the cache.
    Tensor<float> x(Shape{1, 1, E});
    Tensor<float> step(Shape{1, 1, E});
    for (Index i = 0; i < new_tokens; ++i) {
        tokens.push_back(token);
        embed(token, x, 0);
        const Index position = cache.size();
        layer.decode_into(x, cache, step);  // no allocation once the cache's scratch is sized
        keep(x, step, position);
        token = next_token(step, 0);
    }
    std::printf("tokens:");
    for (Index t : tokens) std::printf(" %lld", static_cast<long long>(t));
    std::printf("\n");

    // 3. The check: one causal forward over everything the layer saw.
    headwise::AttentionMasks<float> masks;
    masks.is_causal = true;
    const Tensor<float> full = layer.forward(inputs, inputs, inputs, masks).output;
    float largest = 0, scale = 0;
    for (Index i = 0; i < full.numel(); ++i) {
        largest = std::max(largest, std::abs(full.data()[i] - outputs.data()[i]));
        scale = std::max(scale, std::abs(full.data()[i]));
    }
    const bool ok = largest <= 1e-5f * scale;
    std::printf(
        "decode vs one causal forward over %lld tokens: largest |difference| %.3g "
        "(outputs up to %.3g): %s\n",
        static_cast<long long>(total), static_cast<double>(largest), static_cast<double>(scale),
        ok ? "match" : "MISMATCH");
    return ok ? 0 : 1;
}
