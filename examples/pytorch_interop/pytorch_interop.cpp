// SPDX-License-Identifier: MIT
// Loads a PyTorch TransformerEncoder (two layers, exported by export_encoder.py) from safetensors
// by torch's state-dict names and reproduces torch's output on the same input.
//
//   pytorch_interop [directory holding encoder.safetensors and reference.safetensors]
#include <headwise/headwise.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <cstdio>     // std::printf
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

using headwise::Index;
using headwise::Tensor;

namespace {

/// Runs the two-layer encoder in scalar type T, each layer loaded from the file under its prefix
/// ("layers.0.", "layers.1."), and returns the largest difference from torch's output.
template <class T>
double max_difference(const std::string& dir, headwise::Projection projection) {
    headwise::TransformerEncoderLayerOptions o;  // as torch's TransformerEncoderLayer(...)
    o.d_model = 32;
    o.nhead = 4;
    o.dim_feedforward = 64;
    o.dropout = 0.1;
    o.activation = headwise::Activation::gelu;
    o.projection = projection;

    std::vector<headwise::TransformerEncoderLayer<T>> layers;
    for (int i = 0; i < 2; ++i) {
        layers.emplace_back(o, /*seed=*/i);
        // The entries under "layers.<i>." with that prefix removed: exactly this layer's names.
        const auto sd = headwise::io::load_safetensors<T>(dir + "/encoder.safetensors",
                                                          "layers." + std::to_string(i) + ".");
        layers.back().load_state_dict(sd);
        layers.back().eval();  // as torch's encoder.eval(): no dropout
    }

    const auto ref = headwise::io::load_safetensors<T>(dir + "/reference.safetensors");
    const Tensor<T>& pad = ref.at("key_padding_mask");  // [B, S], 1 = padding
    headwise::AttentionMasks<T> masks;
    masks.key_padding_mask = Tensor<bool>(pad.shape());
    for (Index i = 0; i < pad.numel(); ++i) masks.key_padding_mask.data()[i] = pad.data()[i] != 0;

    Tensor<T> x = ref.at("x");  // [B, L, E]
    for (auto& layer : layers) x = layer.forward(x, masks).output;

    const Tensor<T>& y = ref.at("y");  // torch's output, [B, L, E]
    double worst = 0.0;
    for (Index i = 0; i < y.numel(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(x.data()[i] - y.data()[i])));
    return worst;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : "examples/pytorch_interop";
    bool ok = true;
    for (const headwise::Projection p :
         {headwise::Projection::fused, headwise::Projection::separate,
          headwise::Projection::per_head}) {
        const double f = max_difference<float>(dir, p);
        const double d = max_difference<double>(dir, p);
        std::printf("%-9s largest |headwise - torch|: float %.2e, double %.2e\n",
                    headwise::to_string(p), f, d);
        ok = ok && f < 1e-5 && d < 1e-5;  // torch computed in float32
    }
    std::printf("%s\n", ok ? "headwise reproduces the PyTorch encoder" : "MISMATCH");
    return ok ? 0 : 1;
}
