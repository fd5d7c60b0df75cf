// SPDX-License-Identifier: MIT
// The C++ half of tests/interop/round_trip.py: modules loaded from files tools/export_torch.py
// exported, run on inputs from .npy; and a layer of headwise's own, saved.
//
//   load_exported encoder TORCH.safetensors X.npy OUT.npy OWN.safetensors OWN_OUT.npy
//                 D_MODEL NHEAD DIM_FEEDFORWARD relu|gelu post|pre
//   load_exported mha TORCH.safetensors Q.npy K.npy V.npy OUT.npy E H KDIM VDIM ADD_BIAS_KV
//
// encoder: OUT.npy is the exported TransformerEncoderLayer's output on X under
// Projection::fused (the program checks that separate and per_head agree with it to 1e-12);
// OWN.safetensors the state dict of a layer initialised by headwise (seed 7), OWN_OUT.npy its
// output on X. mha: OUT.npy is the exported MultiheadAttention's output on Q, K, V. Modules in
// eval mode. Exit status 0, or 1 with a message on standard error.

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

int run_mha(char** argv) {
    const std::string torch_model = argv[2], out_path = argv[6];
    headwise::MultiheadAttentionOptions o;
    o.embed_dim = std::stoll(argv[7]);
    o.num_heads = std::stoll(argv[8]);
    o.kdim = std::stoll(argv[9]);
    o.vdim = std::stoll(argv[10]);
    o.add_bias_kv = std::string(argv[11]) == "1";
    const Tensor<double> q = headwise::load_npy<double>(argv[3]);  // [B, L, E]
    const Tensor<double> k = headwise::load_npy<double>(argv[4]);  // [B, S, kdim]
    const Tensor<double> v = headwise::load_npy<double>(argv[5]);  // [B, S, vdim]
    headwise::MultiheadAttention<double> mha(o, /*seed=*/0);
    mha.load_state_dict(headwise::io::load_safetensors<double>(torch_model));
    mha.eval();
    headwise::save_npy(out_path, mha.forward(q, k, v).output);
    std::printf("load_exported: %zu parameters loaded, output written\n", mha.state_dict().size());
    return 0;
}

int run_encoder(char** argv) {
    const std::string torch_model = argv[2], x_path = argv[3], out_path = argv[4],
                      own_model = argv[5], own_out_path = argv[6];
    headwise::TransformerEncoderLayerOptions o;
    o.d_model = std::stoll(argv[7]);
    o.nhead = std::stoll(argv[8]);
    o.dim_feedforward = std::stoll(argv[9]);
    o.activation =
        std::string(argv[10]) == "gelu" ? headwise::Activation::gelu : headwise::Activation::relu;
    o.norm_first = std::string(argv[11]) == "pre";
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
    std::printf("load_exported: %zu parameters loaded, outputs written\n",
                layer.state_dict().size());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (!((mode == "encoder" || mode == "mha") && argc == 12)) {
        std::fprintf(stderr,
                     "usage: load_exported encoder TORCH.safetensors X.npy OUT.npy "
                     "OWN.safetensors OWN_OUT.npy D_MODEL NHEAD DIM_FEEDFORWARD relu|gelu "
                     "post|pre\n"
                     "       load_exported mha TORCH.safetensors Q.npy K.npy V.npy OUT.npy E H "
                     "KDIM VDIM ADD_BIAS_KV\n");
        return 1;
    }
    try {
        return mode == "mha" ? run_mha(argv) : run_encoder(argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "load_exported: %s\n", e.what());
        return 1;
    }
}
