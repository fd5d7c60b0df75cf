// SPDX-License-Identifier: MIT
// Test cases for MultiheadAttention: a configuration, its inputs and masks, and the reference run.
#pragma once

#include <map>       // std::map
#include <optional>  // std::optional
#include <random>    // std::mt19937_64
#include <string>    // std::string
#include <vector>    // std::vector

#include <headwise/layers/attention/multihead_attention.hpp>

#include "reference_attention.hpp"

namespace headwise::test {

enum class Inputs { self, kv_same, distinct };
enum class MaskKind { none, bool_ls, bias_ls, bool_4d, bias_4d, key_padding, causal, all };

/// One attention configuration of the test grids.
struct MhaConfig {
    Index B = 2, L = 3, S = 3, E = 8, H = 2, kdim = 0, vdim = 0;
    Index Hkv = 0;  // key/value heads; 0 = H
    bool bias = true, bias_kv = false, zero_attn = false;
    Inputs inputs = Inputs::self;
    MaskKind masks = MaskKind::none;
    bool need_weights = true;
    bool average = true;
    double dropout = 0.0;
    bool batched = true;
    CausalAlignment alignment = CausalAlignment::top_left;  // of the causal mask
    std::optional<double> scale;                            // unset: 1 / sqrt(D)
    RotaryEmbedding rotary;                                 // RoPE on Q and K; off by default
    Index head_dim = 0;                                     // D; 0 = E / H

    std::string str() const {
        return "B=" + std::to_string(B) + " L=" + std::to_string(L) + " S=" + std::to_string(S) +
               " E=" + std::to_string(E) + " H=" + std::to_string(H) +
               " Hkv=" + std::to_string(Hkv) + " kdim=" + std::to_string(kdim) +
               " vdim=" + std::to_string(vdim) + " bias=" + std::to_string(bias) +
               " bias_kv=" + std::to_string(bias_kv) + " zero_attn=" + std::to_string(zero_attn) +
               " inputs=" + std::to_string(static_cast<int>(inputs)) +
               " masks=" + std::to_string(static_cast<int>(masks)) +
               " dropout=" + std::to_string(dropout) + " batched=" + std::to_string(batched) +
               " alignment=" + to_string(alignment) +
               " scale=" + (scale ? std::to_string(*scale) : std::string("default")) +
               (rotary.enabled ? " rope=" + std::string(to_string(rotary.convention)) +
                                     " theta=" + std::to_string(rotary.theta) +
                                     " factor=" + std::to_string(rotary.scaling_factor)
                               : std::string()) +
               (head_dim ? " head_dim=" + std::to_string(head_dim) : std::string());
    }
    MultiheadAttentionOptions options(Projection p) const {
        MultiheadAttentionOptions o;
        o.embed_dim = E;
        o.num_heads = H;
        o.projection = p;
        o.bias = bias;
        o.kdim = kdim;
        o.vdim = vdim;
        o.add_bias_kv = bias_kv;
        o.add_zero_attn = zero_attn;
        o.dropout = dropout;
        o.scale = scale;
        o.num_kv_heads = Hkv;
        o.rotary = rotary;
        o.head_dim = head_dim;
        return o;
    }
    Index kd() const { return kdim ? kdim : E; }
    Index vd() const { return vdim ? vdim : E; }
};

/// The default configuration changed by `edit`: `with([](MhaConfig& c) { c.H = 1; })`.
template <class Edit>
MhaConfig with(Edit edit) {
    MhaConfig c;
    edit(c);
    return c;
}

/// Inputs and masks of a configuration, drawn from a fixed seed. Every query row keeps at least
/// one visible key (fully masked rows are tested on their own).
template <class T>
struct MhaData {
    Tensor<T> q, k, v;
    AttentionMasks<T> masks;

    const Tensor<T>& key() const { return k.empty() ? q : k; }
    const Tensor<T>& value() const { return v.empty() ? key() : v; }
};

template <class T>
MhaData<T> make_data(const MhaConfig& c, std::uint64_t seed = 7) {
    std::mt19937_64 rng(seed);
    MhaData<T> d;
    const Index S = c.inputs == Inputs::self ? c.L : c.S;
    auto shape = [&](Index n, Index f) { return c.batched ? Shape{c.B, n, f} : Shape{n, f}; };
    d.q = Tensor<T>::randn(shape(c.L, c.E), rng);
    if (c.inputs != Inputs::self) d.k = Tensor<T>::randn(shape(S, c.kd()), rng);
    if (c.inputs == Inputs::distinct) d.v = Tensor<T>::randn(shape(S, c.vd()), rng);
    const Index B = c.batched ? c.B : 1;
    const bool all = c.masks == MaskKind::all;
    // A boolean mask hiding about a third of the scores but never key 0 of any row.
    auto bool_mask = [&](const Shape& s) {
        Tensor<bool> m(s);
        for (Index i = 0; i < m.numel(); ++i) m.data()[i] = (i % S) != 0 && uniform01(rng) < 0.35;
        return m;
    };
    if (c.masks == MaskKind::bool_ls || all) d.masks.attn_mask = bool_mask(Shape{c.L, S});
    if (c.masks == MaskKind::bool_4d) d.masks.attn_mask = bool_mask(Shape{B, c.H, c.L, S});
    if (c.masks == MaskKind::bias_ls || all)
        d.masks.attn_bias = Tensor<T>::randn(Shape{c.L, S}, rng);
    if (c.masks == MaskKind::bias_4d)
        d.masks.attn_bias = Tensor<T>::randn(Shape{B, c.H, c.L, S}, rng);
    if (c.masks == MaskKind::key_padding || all) {
        d.masks.key_padding_mask = c.batched ? Tensor<bool>(Shape{B, S}) : Tensor<bool>(Shape{S});
        for (Index i = 0; i < d.masks.key_padding_mask.numel(); ++i)
            d.masks.key_padding_mask.data()[i] = (i % S) != 0 && uniform01(rng) < 0.3;
    }
    d.masks.is_causal = c.masks == MaskKind::causal || all;
    d.masks.causal_alignment = c.alignment;
    d.masks.need_weights = c.need_weights;
    d.masks.average_attn_weights = c.average;
    return d;
}

template <class T>
std::map<std::string, std::vector<double>> params_in_double(const MultiheadAttention<T>& m) {
    std::map<std::string, std::vector<double>> p;
    for (const auto& [name, t] : m.state_dict()) p[name] = std::vector<double>(t.begin(), t.end());
    return p;
}

/// The reference loops on the same parameters, inputs and masks; output shaped as the module's.
/// `dropout`: the per-weight dropout factors [B, H, L, S'] (see reference_mha), or none.
template <class T>
ReferenceAttention run_reference(const MhaConfig& c, const MultiheadAttention<T>& m,
                                 const MhaData<T>& d,
                                 const std::vector<double>* dropout = nullptr) {
    auto dbl = [](const Tensor<T>& t) { return std::vector<double>(t.begin(), t.end()); };
    ReferenceProblem p;
    p.B = c.batched ? c.B : 1;
    p.L = c.L;
    p.S = c.inputs == Inputs::self ? c.L : c.S;
    p.E = c.E;
    p.H = c.H;
    p.kdim = c.kd();
    p.vdim = c.vd();
    p.num_kv_heads = c.Hkv;
    p.bias = c.bias;
    p.bias_kv = c.bias_kv;
    p.zero_attn = c.zero_attn;
    p.scale = c.scale;
    p.head_dim = c.head_dim;
    p.dropout = dropout;
    p.rope.enabled = c.rotary.enabled;
    p.rope.theta = c.rotary.theta;
    p.rope.interleaved = c.rotary.convention == RopeConvention::interleaved;
    p.rope.factor = c.rotary.scaling_factor;
    if (!d.masks.attn_mask.empty()) {
        p.masks.attn_mask = d.masks.attn_mask.data();
        p.masks.attn_mask_4d = d.masks.attn_mask.rank() == 4;
    }
    const std::vector<double> attn_bias = dbl(d.masks.attn_bias);
    if (!d.masks.attn_bias.empty()) {
        p.masks.attn_bias = attn_bias.data();
        p.masks.attn_bias_4d = d.masks.attn_bias.rank() == 4;
    }
    if (!d.masks.key_padding_mask.empty()) p.masks.key_padding = d.masks.key_padding_mask.data();
    p.masks.causal = d.masks.is_causal;
    p.masks.causal_offset = ops::causal_offset(c.alignment, c.L, p.S);
    const std::vector<double> head_mask = dbl(d.masks.head_mask);
    if (!d.masks.head_mask.empty()) {
        p.head_mask = head_mask.data();
        p.head_mask_batched = d.masks.head_mask.rank() == 2;
    }
    return reference_mha(params_in_double(m), p, dbl(d.q), dbl(d.key()), dbl(d.value()));
}

}  // namespace headwise::test
