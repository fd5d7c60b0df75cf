// SPDX-License-Identifier: MIT
// A tiny Llama-family model built from a configuration (no files), its logits for a prompt and
// a few greedy tokens: the one-file inference program that CI compiles against
// headwise::compiled, whose compile time docs/building.md quotes.
#include <headwise/headwise.hpp>

#include <cmath>    // std::isfinite
#include <cstdint>  // std::int64_t
#include <cstdio>   // std::printf
#include <random>   // std::mt19937_64, std::normal_distribution
#include <vector>   // std::vector

int main() {
    using headwise::Index;
    using headwise::Shape;
    using headwise::Tensor;
    namespace models = headwise::models;

    models::LlamaConfig config;
    config.vocab_size = 64;
    config.hidden_size = 32;        // E
    config.intermediate_size = 64;  // I
    config.num_hidden_layers = 2;
    config.num_attention_heads = 4;
    config.num_key_value_heads = 2;  // grouped-query attention
    config.max_position_embeddings = 32;
    models::LlamaForCausalLM<float> model(config, headwise::Projection::fused,
                                          headwise::uninitialized);

    // Random weights in place of load_pretrained() / from_pretrained(dir).
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    for (headwise::Parameter<float>& p : model.parameters())
        for (Index i = 0; i < p.value.numel(); ++i) p.value[i] = normal(rng);
    model.eval();

    const Tensor<std::int64_t> ids(Shape{1, 5}, std::vector<std::int64_t>{1, 7, 3, 12, 5});
    const Tensor<float> logits = model.forward(ids.view());  // [1, 5, V]
    for (Index i = 0; i < logits.numel(); ++i)
        if (!std::isfinite(logits.data()[i])) return 1;

    models::GenerationOptions options;
    options.max_new_tokens = 6;
    const std::vector<std::vector<std::int64_t>> out =
        models::generate(model, {{1, 7, 3, 12, 5}}, options);
    std::printf("logits %s; greedy continuation:", logits.shape().str().c_str());
    for (std::int64_t id : out[0]) std::printf(" %lld", static_cast<long long>(id));
    std::printf("\n");
    return out.size() == 1 && out[0].size() <= 6 ? 0 : 1;
}
