// SPDX-License-Identifier: MIT
// Loads attention weights kept per head (one small Linear per head, as the paper writes it) into a
// MultiheadAttention through its writable head views, and checks the output against PyTorch's.
//
// The weights, an input and PyTorch's output come from per_head_weights.py (beside this file),
// saved as .npy files in per_head_weights/. Usage: per_head_weights [directory of the .npy files]
#include <headwise/headwise.hpp>

#include <algorithm>  // std::copy, std::max
#include <cmath>      // std::abs
#include <iostream>   // std::cout
#include <map>        // std::map
#include <string>     // std::string

#ifndef HEADWISE_EXAMPLES_DIR
#define HEADWISE_EXAMPLES_DIR "."
#endif

int main(int argc, char** argv) {
    const std::string dir =
        argc > 1 ? argv[1] : std::string(HEADWISE_EXAMPLES_DIR) + "/per_head_weights";
    const std::map<std::string, headwise::Tensor<float>> w = headwise::load_npy_dict<float>(dir);

    headwise::MultiheadAttentionOptions options;
    options.embed_dim = 8;
    options.num_heads = 2;
    headwise::MultiheadAttention<float> mha(options);

    // Head i's W_i^Q, W_i^K, W_i^V [D, E] and biases [D] go straight into the packed parameters.
    auto copy = [](const headwise::Tensor<float>& from, headwise::TensorView<float> to) {
        std::copy(from.begin(), from.end(), to.begin());  // the shapes are checked below
    };
    for (headwise::Index i = 0; i < mha.num_heads(); ++i) {
        const std::string head = "head" + std::to_string(i) + ".";
        const headwise::HeadParameters<float> h = mha.head(i);
        for (auto [name, weight, bias] : {std::make_tuple("q", h.q_weight(), h.q_bias()),
                                          std::make_tuple("k", h.k_weight(), h.k_bias()),
                                          std::make_tuple("v", h.v_weight(), h.v_bias())}) {
            const headwise::Tensor<float>& W = w.at(head + name + ".weight");  // [D, E]
            const headwise::Tensor<float>& b = w.at(head + name + ".bias");    // [D]
            if (W.shape() != weight.shape() || b.shape() != bias.shape()) {
                std::cout << head << name << ": expected " << weight.shape() << " and "
                          << bias.shape() << ", got " << W.shape() << " and " << b.shape() << "\n";
                return 1;
            }
            copy(W, weight);
            copy(b, bias);
        }
    }
    // The output projection is one Linear already: load it by name.
    headwise::StateDict<float> out = mha.state_dict();
    out.at("out_proj.weight") = w.at("out.weight");
    out.at("out_proj.bias") = w.at("out.bias");
    mha.load_state_dict(out);

    mha.eval();
    const headwise::Tensor<float>& x = w.at("x");  // [L, E]
    const headwise::Tensor<float> y = mha.forward(x, x, x).output;
    const headwise::Tensor<float>& expected = w.at("y");  // PyTorch's output, [L, E]
    float worst = 0.0f;
    for (headwise::Index i = 0; i < y.numel(); ++i)
        worst = std::max(worst, std::abs(y.data()[i] - expected.data()[i]));
    std::cout << "output " << y.shape() << ", largest difference from PyTorch's: " << worst << "\n";
    return worst <= 1e-5f ? 0 : 1;
}
