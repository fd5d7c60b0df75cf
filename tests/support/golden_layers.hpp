// SPDX-License-Identifier: MIT
// The golden cases of torch's encoder and decoder layers (tests/golden/encoder/<name>,
// tests/golden/decoder/<name> with the shared decoder/params), read once for every test that
// uses them: meta.txt, the parameters, inputs, masks, outputs and gradients, in double.
#pragma once

#include <headwise/io/npy.hpp>
#include <headwise/layers/transformer_decoder_layer.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>

#include <filesystem>  // std::filesystem::path, std::filesystem::exists
#include <fstream>     // std::ifstream
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string, std::getline, std::stoi, std::stod

#include "golden.hpp"  // golden_dir

namespace headwise::test {

/// The key=value lines of a golden case's meta.txt; throws std::runtime_error when the file
/// cannot be read or holds none.
inline std::map<std::string, std::string> read_golden_meta(const std::filesystem::path& file) {
    std::map<std::string, std::string> meta;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
        const auto eq = line.find('=');
        if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
    }
    if (meta.empty()) throw std::runtime_error(file.string() + ": no key=value line");
    return meta;
}

/// The options every golden layer case states in its meta.txt (both layers have these fields);
/// dropout 0, as the cases were made.
template <class Options>
Options golden_layer_options(const std::map<std::string, std::string>& meta) {
    Options o;
    o.d_model = std::stoi(meta.at("d_model"));
    o.nhead = std::stoi(meta.at("nhead"));
    o.dim_feedforward = std::stoi(meta.at("dim_feedforward"));
    o.activation = meta.at("activation") == "gelu" ? Activation::gelu : Activation::relu;
    o.norm_first = meta.at("norm_first") == "1";
    o.layer_norm_eps = std::stod(meta.at("layer_norm_eps"));
    o.dropout = 0.0;
    return o;
}

/// torch's nn.TransformerEncoderLayer(batch_first=True) on one input, in double.
struct EncoderCase {
    TransformerEncoderLayerOptions options;
    StateDict<double> state, grads;  // torch's names
    Tensor<double> x, grad_output, output, grad_x;
    Tensor<bool> attn_mask, key_padding_mask;  // empty where the case has none
};

inline EncoderCase load_encoder_case(const std::string& name) {
    const std::filesystem::path dir = golden_dir() / "encoder" / name;
    const auto file = [&](const char* f) { return (dir / f).string(); };
    EncoderCase c;
    c.options =
        golden_layer_options<TransformerEncoderLayerOptions>(read_golden_meta(dir / "meta.txt"));
    // The parameters are the files named as the gradients of grad/.
    c.grads = load_npy_dict<double>(file("grad"));
    for (const auto& entry : c.grads)
        c.state.emplace(entry.first, load_npy<double>((dir / (entry.first + ".npy")).string()));
    c.x = load_npy<double>(file("x.npy"));
    c.grad_output = load_npy<double>(file("grad_output.npy"));
    c.output = load_npy<double>(file("output.npy"));
    c.grad_x = load_npy<double>(file("grad_x.npy"));
    if (std::filesystem::exists(dir / "attn_mask.npy"))
        c.attn_mask = load_npy<bool>(file("attn_mask.npy"));
    if (std::filesystem::exists(dir / "key_padding_mask.npy"))
        c.key_padding_mask = load_npy<bool>(file("key_padding_mask.npy"));
    return c;
}

/// torch's nn.TransformerDecoderLayer(batch_first=True) on one target and memory, in double;
/// every case shares the parameters of tests/golden/decoder/params.
struct DecoderCase {
    TransformerDecoderLayerOptions options;
    StateDict<double> state, grads;
    Tensor<double> tgt, memory, grad_output, output, grad_tgt, grad_memory;
    Tensor<bool> tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask;
    Tensor<double> tgt_mask_float;  // additive, -inf above the diagonal, where the case has it
};

inline DecoderCase load_decoder_case(const std::string& name) {
    const std::filesystem::path root = golden_dir() / "decoder";
    const std::filesystem::path dir = root / name;
    const auto file = [&](const char* f) { return (dir / f).string(); };
    DecoderCase c;
    c.options =
        golden_layer_options<TransformerDecoderLayerOptions>(read_golden_meta(dir / "meta.txt"));
    c.state = load_npy_dict<double>((root / "params").string());
    c.grads = load_npy_dict<double>(file("grad"));
    c.tgt = load_npy<double>(file("tgt.npy"));
    c.memory = load_npy<double>(file("memory.npy"));
    c.grad_output = load_npy<double>(file("grad_output.npy"));
    c.output = load_npy<double>(file("output.npy"));
    c.grad_tgt = load_npy<double>(file("grad_tgt.npy"));
    c.grad_memory = load_npy<double>(file("grad_memory.npy"));
    c.tgt_key_padding_mask = load_npy<bool>(file("tgt_key_padding_mask.npy"));
    c.memory_key_padding_mask = load_npy<bool>(file("memory_key_padding_mask.npy"));
    if (std::filesystem::exists(dir / "tgt_mask.npy"))
        c.tgt_mask = load_npy<bool>(file("tgt_mask.npy"));
    if (std::filesystem::exists(dir / "tgt_mask_float.npy"))
        c.tgt_mask_float = load_npy<double>(file("tgt_mask_float.npy"));
    if (std::filesystem::exists(dir / "memory_mask.npy"))
        c.memory_mask = load_npy<bool>(file("memory_mask.npy"));
    return c;
}

}  // namespace headwise::test
