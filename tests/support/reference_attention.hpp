// SPDX-License-Identifier: MIT
// Multi-head attention forward in plain loops and double precision: the oracle for the module.
#pragma once

#include <cmath>     // std::exp, std::sqrt, std::isinf, std::cos, std::sin, std::pow
#include <limits>    // std::numeric_limits
#include <map>       // std::map
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include <headwise/tensor.hpp>

namespace headwise::test {

/// Result of reference_mha: output [B, L, E] and per-head weights [B, H, L, S'] (after dropout,
/// when a dropout mask is given, as torch returns them).
struct ReferenceAttention {
    std::vector<double> output;   // [B, L, E]
    std::vector<double> weights;  // [B, H, L, S']
    Index Sx = 0;
};

struct ReferenceMasks {
    const bool* attn_mask = nullptr;  // [L, S] or [B, H, L, S]
    bool attn_mask_4d = false;
    const double* attn_bias = nullptr;  // [L, S] or [B, H, L, S]
    bool attn_bias_4d = false;
    const bool* key_padding = nullptr;  // [B, S]
    bool causal = false;
    Index causal_offset = 0;  // causal: query i may attend key j when j <= i + causal_offset
};

/// Rotary position embeddings in the reference: query i and key j of each head rotated by the
/// angles (position / factor) theta^(-2p / D) of their pairs p, position i and j.
struct ReferenceRope {
    bool enabled = false;
    double theta = 10000.0;
    bool interleaved = false;  // pairs (2p, 2p + 1); else (p, p + D/2)
    double factor = 1.0;
};

/// The sizes and options of one reference_mha run, named; the masks and dropout factors point
/// into storage the caller keeps alive.
struct ReferenceProblem {
    Index B = 1, L = 1, S = 1, E = 1, H = 1;
    Index kdim = 0, vdim = 0;           // features of the key and value inputs; 0 = E
    Index num_kv_heads = 0;             // key/value heads Hkv; 0 = H
    bool bias = true;                   // in_proj_bias and out_proj.bias
    bool bias_kv = false;               // append bias_k and bias_v as one more key and value
    bool zero_attn = false;             // append a zero key and value
    std::optional<double> scale;        // of the scores; unset: 1 / sqrt(D)
    Index head_dim = 0;                 // D; 0 = E / H
    const double* head_mask = nullptr;  // [H] or [B, H]: head h's probabilities times it
    bool head_mask_batched = false;     // [B, H]
    ReferenceMasks masks;
    const std::vector<double>* dropout = nullptr;  // one factor per weight [B, H, L, S'], or none
    ReferenceRope rope;                            // applied to Q and K after the projection
};

/// Follows torch.nn.functional.multi_head_attention_forward step by step, with loops:
/// project, append bias_k/bias_v, append zero attention, scores, masks, softmax (a row with no
/// visible key is all zero), dropout, weighted sum, output projection. `params` holds
/// state_dict() names; q [B, L, E], k [B, S, kdim] and v [B, S, vdim] the inputs. The scores are
/// scaled by `problem.scale`, 1 / sqrt(D) when unset. `problem.dropout`, when given, holds one
/// factor per weight [B, H, L, S']: 0 where the weight is dropped, 1 / (1 - dropout) where it is
/// kept. With `problem.num_kv_heads` = Hkv key/value heads, K and V have Hkv D features and query
/// head h reads key/value head h / (H / Hkv). `problem.head_dim` sets D (Q has H D features,
/// out_proj.weight is [E, H D]); `problem.head_mask` multiplies head h's probabilities (after
/// dropout), as Hugging Face's head_mask does.
inline ReferenceAttention reference_mha(const std::map<std::string, std::vector<double>>& params,
                                        const ReferenceProblem& problem,
                                        const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v) {
    const Index B = problem.B, L = problem.L, S = problem.S, E = problem.E, H = problem.H;
    const Index kdim = problem.kdim ? problem.kdim : E, vdim = problem.vdim ? problem.vdim : E;
    const bool bias = problem.bias, bias_kv = problem.bias_kv, zero_attn = problem.zero_attn;
    const ReferenceMasks& masks = problem.masks;
    const std::vector<double>* dropout = problem.dropout;
    const Index D = problem.head_dim ? problem.head_dim : E / H;
    const Index HD = H * D;  // the inner width: features of Q and of the concatenated heads
    const Index Hkv = problem.num_kv_heads ? problem.num_kv_heads : H;
    const Index group = H / Hkv;                      // query heads per key/value head
    const Index rows_of[3] = {HD, Hkv * D, Hkv * D};  // output features of each projection
    const Index row0[3] = {0, HD, HD + Hkv * D};      // first row of each in the packed weight
    const bool packed = params.count("in_proj_weight") > 0;
    // Weight rows of projection p (0 q, 1 k, 2 v): element (o, c) of W_p [rows_of[p], in_p].
    auto w = [&](int p, Index o, Index c) -> double {
        if (packed)
            return params.at("in_proj_weight")[static_cast<std::size_t>((row0[p] + o) * E + c)];
        const char* names[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
        const Index in = p == 0 ? E : (p == 1 ? kdim : vdim);
        return params.at(names[p])[static_cast<std::size_t>(o * in + c)];
    };
    auto b_in = [&](int p, Index o) -> double {
        return bias ? params.at("in_proj_bias")[static_cast<std::size_t>(row0[p] + o)] : 0.0;
    };
    auto project = [&](int p, const std::vector<double>& x, Index rows, Index in) {
        const Index F = rows_of[p];
        std::vector<double> y(static_cast<std::size_t>(B * rows * F));
        for (Index n = 0; n < B * rows; ++n)
            for (Index o = 0; o < F; ++o) {
                double acc = b_in(p, o);
                for (Index c = 0; c < in; ++c)
                    acc += x[static_cast<std::size_t>(n * in + c)] * w(p, o, c);
                y[static_cast<std::size_t>(n * F + o)] = acc;
            }
        return y;
    };
    const Index F = Hkv * D;                         // key/value features
    std::vector<double> Q = project(0, q, L, E);     // [B, L, H D]
    std::vector<double> K = project(1, k, S, kdim);  // [B, S, Hkv D]
    std::vector<double> V = project(2, v, S, vdim);  // [B, S, Hkv D]
    // RoPE: each head's features (a, b) of pair p turned by the angle of row n's position.
    auto rotate = [&](std::vector<double>& X, Index rows, Index features) {
        const ReferenceRope& r = problem.rope;
        for (Index b = 0; b < B; ++b)
            for (Index n = 0; n < rows; ++n)
                for (Index h = 0; h < features / D; ++h)
                    for (Index pr = 0; pr < D / 2; ++pr) {
                        const Index a = r.interleaved ? 2 * pr : pr;
                        const Index c = r.interleaved ? 2 * pr + 1 : pr + D / 2;
                        const double angle = static_cast<double>(n) / r.factor /
                                             std::pow(r.theta, 2.0 * static_cast<double>(pr) /
                                                                   static_cast<double>(D));
                        double& xa =
                            X[static_cast<std::size_t>((b * rows + n) * features + h * D + a)];
                        double& xc =
                            X[static_cast<std::size_t>((b * rows + n) * features + h * D + c)];
                        const double ya = xa * std::cos(angle) - xc * std::sin(angle);
                        const double yc = xc * std::cos(angle) + xa * std::sin(angle);
                        xa = ya;
                        xc = yc;
                    }
    };
    if (problem.rope.enabled) {
        rotate(Q, L, HD);
        rotate(K, S, Hkv * D);
    }
    const Index Sx = S + (bias_kv ? 1 : 0) + (zero_attn ? 1 : 0);
    auto kx = [&](Index b, Index j, Index e) -> double {  // keys after appending, e < Hkv D
        if (j < S) return K[static_cast<std::size_t>((b * S + j) * F + e)];
        if (bias_kv && j == S) return params.at("bias_k")[static_cast<std::size_t>(e)];
        return 0.0;
    };
    auto vx = [&](Index b, Index j, Index e) -> double {
        if (j < S) return V[static_cast<std::size_t>((b * S + j) * F + e)];
        if (bias_kv && j == S) return params.at("bias_v")[static_cast<std::size_t>(e)];
        return 0.0;
    };

    ReferenceAttention r;
    r.Sx = Sx;
    r.weights.assign(static_cast<std::size_t>(B * H * L * Sx), 0.0);
    std::vector<double> ctx(static_cast<std::size_t>(B * L * HD), 0.0);
    const double scale = problem.scale ? *problem.scale : 1.0 / std::sqrt(static_cast<double>(D));
    const double inf = std::numeric_limits<double>::infinity();
    for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h)
            for (Index i = 0; i < L; ++i) {
                std::vector<double> s(static_cast<std::size_t>(Sx));
                double m = -inf;
                for (Index j = 0; j < Sx; ++j) {
                    double acc = 0;
                    for (Index d = 0; d < D; ++d)
                        acc += Q[static_cast<std::size_t>((b * L + i) * HD + h * D + d)] *
                               kx(b, j, (h / group) * D + d);
                    acc *= scale;
                    if (j < S) {
                        const Index mi = (masks.attn_mask_4d ? ((b * H + h) * L + i) : i) * S + j;
                        const Index bi = (masks.attn_bias_4d ? ((b * H + h) * L + i) : i) * S + j;
                        if (masks.attn_bias) acc += masks.attn_bias[bi];
                        if (masks.attn_mask && masks.attn_mask[mi]) acc = -inf;
                        if (masks.key_padding && masks.key_padding[b * S + j]) acc = -inf;
                        if (masks.causal && j > i + masks.causal_offset) acc = -inf;
                    }
                    s[static_cast<std::size_t>(j)] = acc;
                    if (acc > m) m = acc;
                }
                double sum = 0;
                for (double& x : s) {
                    x = std::isinf(x) && x < 0 ? 0.0 : std::exp(x - m);
                    sum += x;
                }
                for (Index j = 0; j < Sx; ++j) {
                    const std::size_t at = static_cast<std::size_t>(((b * H + h) * L + i) * Sx + j);
                    double p = sum > 0 ? s[static_cast<std::size_t>(j)] / sum : 0.0;
                    if (dropout) p *= (*dropout)[at];
                    if (problem.head_mask)
                        p *= problem.head_mask[problem.head_mask_batched ? b * H + h : h];
                    r.weights[at] = p;
                    for (Index d = 0; d < D; ++d)
                        ctx[static_cast<std::size_t>((b * L + i) * HD + h * D + d)] +=
                            p * vx(b, j, (h / group) * D + d);
                }
            }
    r.output.assign(static_cast<std::size_t>(B * L * E), 0.0);
    const std::vector<double>& wo = params.at("out_proj.weight");
    for (Index n = 0; n < B * L; ++n)
        for (Index o = 0; o < E; ++o) {
            double acc = bias ? params.at("out_proj.bias")[static_cast<std::size_t>(o)] : 0.0;
            for (Index c = 0; c < HD; ++c)
                acc += ctx[static_cast<std::size_t>(n * HD + c)] *
                       wo[static_cast<std::size_t>(o * HD + c)];
            r.output[static_cast<std::size_t>(n * E + o)] = acc;
        }
    return r;
}

}  // namespace headwise::test
