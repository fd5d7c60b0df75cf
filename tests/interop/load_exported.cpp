// SPDX-License-Identifier: MIT
// The C++ half of tests/interop/round_trip.py: a TransformerEncoderLayer<double> from a file
// tools/export_torch.py exported, run on an input from .npy; and one of headwise's own, saved.
//
//   load_exported TORCH.safetensors X.npy OUT.npy OWN.safetensors OWN_OUT.npy
//                 D_MODEL NHEAD DIM_FEEDFORWARD relu|gelu post|pre
//
// OUT.npy: the exported layer's output on X under Projection::fused (the program checks that
// separate and per_head agree with it to 1e-12). OWN.safetensors: the state dict of a layer
// initialised by headwise (seed 7), OWN_OUT.npy its output on X. Both layers in eval mode.
// Exit status 0, or 1 with a message on standard error.

#include <headwise/io/npy.hpp>
#include <headwise/io/safetensors.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <cstdio>     // std::fprintf, std::printf
#include <exception>  // std::exception
#include <string>     // std::string, std::stoll

namespace {

using headwise::Index;
using headwise::Tensor;
using Layer = headwise::TransformerEncoderLayer<double>;

constexpr double kProjectionTolerance = 1e-12;

double max_abs_difference(const Tensor<double>& a, const Tensor<double>& b) {
    double worst = 0.0;
    for (Index i = 0; i < a.numel(); ++i)
        worst = std::max(worst, std::abs(a.data()[i] - b.data()[i]));
    return worst;
}

int run(char** argv) {
    const std::string torch_model = argv[1], x_path = argv[2], out_path = argv[3],
                      own_model = argv[4], own_out_path = argv[5];
    headwise::TransformerEncoderLayerOptions o;
    o.d_model = std::stoll(argv[6]);
    o.nhead = std::stoll(argv[7]);
    o.dim_feedforward = std::stoll(argv[8]);
    o.activation =
        std::string(argv[9]) == "gelu" ? headwise::Activation::gelu : headwise::Activation::relu;
    o.norm_first = std::string(argv[10]) == "pre";
    o.dropout = 0.0;

    const Tensor<double> x = headwise::load_npy<double>(x_path);  // [B, L, E]

    // torch -> headwise: the exported state dict loads under torch's names, strictly.
    Layer layer(o, /*seed=*/0);
    layer.load_state_dict(headwise::io::load_safetensors<double>(torch_model));
    layer.eval();
    const Tensor<double> y = layer.forward(x).output;  // [B, L, E]
    for (const auto projection : {headwise::Projection::separate, headwise::Projection::per_head}) {
        layer.with_projection(projection);
        const double d = max_abs_difference(layer.forward(x).output, y);
        if (!(d <= kProjectionTolerance)) {
            std::fprintf(stderr, "projection %d differs from fused by %g\n",
                         static_cast<int>(projection), d);
            return 1;
        }
    }
    headwise::save_npy(out_path, y);

    // headwise -> torch: a layer of headwise's own initialisation, saved with its output.
    Layer own(o, /*seed=*/7);
    own.eval();
    headwise::io::save_safetensors(own_model, own.state_dict());
    headwise::save_npy(own_out_path, own.forward(x).output);
    std::printf("load_exported: %lld parameters loaded, outputs written\n",
                static_cast<long long>(layer.state_dict().size()));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 11) {
        std::fprintf(stderr,
                     "usage: load_exported TORCH.safetensors X.npy OUT.npy OWN.safetensors "
                     "OWN_OUT.npy D_MODEL NHEAD DIM_FEEDFORWARD relu|gelu post|pre\n");
        return 1;
    }
    try {
        return run(argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "load_exported: %s\n", e.what());
        return 1;
    }
}
