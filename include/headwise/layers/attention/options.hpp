// SPDX-License-Identifier: MIT
// What a MultiheadAttention is built from and called with: options, projection choice, masks.
#pragma once

#include <cmath>        // std::abs, std::sqrt, std::isfinite
#include <cstdio>       // std::snprintf
#include <cstdlib>      // std::strtod
#include <limits>       // std::numeric_limits
#include <optional>     // std::optional
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_floating_point_v, std::is_same_v

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../ops/blocked_attention.hpp"
#include "../../ops/score_mask.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"

namespace headwise {

/// How MultiheadAttention computes the Q, K, V projections. All three use the same parameters
/// and give the same outputs and gradients; they differ in speed (see the benchmarks).
enum class Projection {
    /// One GEMM against the packed [3E, E] in-projection when query, key and value are the same
    /// tensor; a Q GEMM and one packed K|V GEMM when key and value are the same tensor (and
    /// kdim == vdim); otherwise one GEMM per input.
    fused,
    /// Three GEMMs, one per projection, each [N, in] x [in, E].
    separate,
    /// 3 H GEMMs against the per-head matrices W_i^Q, W_i^K, W_i^V of shape [D, in], exactly
    /// head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (Vaswani et al. 2017, Section 3.2.2).
    per_head,
};

inline const char* to_string(Projection p) noexcept {
    switch (p) {
        case Projection::fused:
            return "fused";
        case Projection::separate:
            return "separate";
        case Projection::per_head:
            return "per_head";
    }
    return "unknown";
}

namespace detail {

/// Throws std::invalid_argument unless `p` is one of the enumerators (a value cast from an
/// integer may be none of them).
inline void check_projection(const char* function, const char* argument, Projection p) {
    if (p != Projection::fused && p != Projection::separate && p != Projection::per_head)
        throw_invalid_argument(function, argument, "must be fused, separate or per_head",
                               "Projection(" + std::to_string(static_cast<int>(p)) + ")");
}

/// True for a mask that is absent: default-constructed, of shape [0]. Any other shape, empty
/// or not, is checked against the call.
template <class U>
bool mask_absent(const Tensor<U>& mask) {
    return mask.shape() == Shape{0};
}

}  // namespace detail

/// Which attention kernel MultiheadAttention runs for each (batch, head) slice. Both give the
/// same outputs, gradients and dropout masks (to rounding); they differ in memory and speed.
enum class AttentionKernel {
    /// `blocked` unless the call asks for the attention weights (need_weights), or the sequences
    /// are short (L Sx <= kMaterialisedMaxScores = 512 * 512 scores per slice), where the
    /// materialised kernel is measured faster (its backward does one product less): bench_long
    /// at (8, 128, 512, 8), bench_mha at (1, 512, 768, 12).
    automatic,
    /// ops/blocked_attention.hpp (FlashAttention-2 style): training keeps O and one log-sum-exp
    /// per query row, [B, H, L], and backward recomputes the probabilities tile by tile; no
    /// [L, Sx] matrix is ever held. With need_weights the weights are recomputed from the
    /// log-sum-exp (one more Q K^T per slice), averaged ones costing [B, L, Sx] only.
    blocked,
    /// ops/attention.hpp: each slice's [L, Sx] probabilities are materialised; training keeps
    /// them all, [B, H, L, Sx], for backward.
    materialised,
};

inline const char* to_string(AttentionKernel k) noexcept {
    switch (k) {
        case AttentionKernel::automatic:
            return "automatic";
        case AttentionKernel::blocked:
            return "blocked";
        case AttentionKernel::materialised:
            return "materialised";
    }
    return "unknown";
}

/// The constructor arguments of torch.nn.MultiheadAttention (batch_first is always true here).
struct MultiheadAttentionOptions {
    Index embed_dim = 0;  // E
    Index num_heads = 1;  // H; must divide E; D = E / H
    Projection projection = Projection::fused;
    bool bias = true;            // in_proj_bias and out_proj.bias
    Index kdim = 0;              // key features; 0 means embed_dim
    Index vdim = 0;              // value features; 0 means embed_dim
    bool add_bias_kv = false;    // learnt bias_k, bias_v appended to the keys and values
    bool add_zero_attn = false;  // a zero key and value appended after them
    double dropout = 0.0;        // on the attention weights, in training mode; in [0, 1)
    /// In training mode forward keeps views of query, key and value for backward's weight
    /// gradients instead of copies, saving a copy of each input per call. The lifetime rule:
    /// the tensors passed to a training forward must stay alive and unchanged until backward
    /// has run on its result (as when the caller keeps its activations for its own backward).
    bool reference_inputs = false;

    // Key/value heads Hkv (grouped-query attention): must divide num_heads; 0 means num_heads
    // (multi-head attention), 1 is multi-query attention. Query head h uses key/value head
    // h / (num_heads / Hkv). K and V then have Hkv D features: in_proj_weight [E + 2 Hkv D, E].
    Index num_kv_heads = 0;

    // Multiplies the scores Q K^T; unset means 1 / sqrt(D). Must be finite in the module's
    // scalar type, and 0 or a normal number there (a smaller one would underflow).
    std::optional<double> scale;

    // Which kernel computes attention (see AttentionKernel): automatic, or forced either way
    // (for tests, and for whoever wants the weights from the materialised kernel).
    AttentionKernel attention_kernel = AttentionKernel::automatic;

    // The blocked kernel's tiles: `rows` query rows (Br) meet `cols` keys (Bc) at a time; both at
    // least 1 (a tile larger than a call's L x Sx scores covers the slice whole). The defaults
    // are the measured fastest (ops::AttentionTiles); other tiles change only the order in which
    // the online softmax and the gradients are summed, so results agree to rounding. Tests set
    // a few rows and keys so that short sequences cross tiles (the running-max rescale, tiles
    // the causal rule skips or cuts); a backward runs with the tiles of its forward.
    ops::AttentionTiles attention_tiles;
};

namespace detail {

/// "float" or "double", for messages.
template <class T>
const char* scalar_type_name() noexcept {
    return std::is_same_v<T, float> ? "float" : "double";
}

/// `x` in the fewest significant digits that read back as the same T ("0.5", "1e+300",
/// "0.7071067811865475"), for messages.
template <class T>
std::string shortest_str(T x) {
    char text[32];
    for (int digits = 1; digits <= std::numeric_limits<T>::max_digits10; ++digits) {
        std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(x));
        if (static_cast<T>(std::strtod(text, nullptr)) == x) break;
    }
    return text;
}

/// The factor of the scores Q K^T, in T: options.scale, or 1 / sqrt(D) when it is unset.
template <class T>
T attention_scale(const MultiheadAttentionOptions& o) {
    return o.scale ? static_cast<T>(*o.scale)
                   : T(1) / std::sqrt(static_cast<T>(o.embed_dim / o.num_heads));
}

/// Throws std::invalid_argument unless options.scale (when set) is finite in T and is 0 or a
/// normal number of T: checked in T because a double such as 1e300 is finite, but inf in float
/// (every output NaN), and 1e-300 becomes 0 in float (uniform attention the caller did not ask
/// for).
template <class T>
void check_scale(const char* function, const std::optional<double>& scale) {
    if (!scale) return;
    const double s = *scale;
    const T t = static_cast<T>(s);
    const std::string type = scalar_type_name<T>();
    if (!std::isfinite(s) || !std::isfinite(t))
        throw_invalid_argument(function, "options.scale",
                               "must be finite in " + type + " (at most " +
                                   shortest_str(std::numeric_limits<T>::max()) +
                                   " in magnitude), or unset for 1 / sqrt(D)",
                               shortest_str(s));
    if (s != 0.0 && !(std::abs(t) >= std::numeric_limits<T>::min()))
        throw_invalid_argument(function, "options.scale",
                               "must be 0 or at least " +
                                   shortest_str(std::numeric_limits<T>::min()) +
                                   " in magnitude in " + type +
                                   " (a smaller one underflows), or unset for 1 / sqrt(D)",
                               shortest_str(s));
}

/// Each option that fixes what a forward computes, or the buffers it keeps for backward, and
/// differs between `expected` (the module running backward) and `actual` (the one that ran the
/// forward), as "name: expected X, got Y", joined by "; "; empty when none does. A default
/// taken from another option (kdim and vdim 0: embed_dim; num_kv_heads 0: num_heads; scale
/// unset: 1 / sqrt(D)) is compared when either module sets it; when neither does, it differs
/// only if the option it comes from does, which is named instead. The scale is compared in T,
/// the type the kernels use. Not compared: projection, attention_kernel, attention_tiles and
/// reference_inputs choose how a forward runs, not what it computes (tiles: only the order of
/// sums), and the forward saves its choice for backward to follow.
template <class T>
std::string differing_options(const MultiheadAttentionOptions& expected,
                              const MultiheadAttentionOptions& actual) {
    // Names every field: adding one to MultiheadAttentionOptions stops this from compiling until
    // it is sorted here into compared or not compared.
    [[maybe_unused]] const auto& [embed_dim, num_heads, projection, bias, kdim, vdim, add_bias_kv,
                                  add_zero_attn, dropout, reference_inputs, num_kv_heads, scale,
                                  attention_kernel, attention_tiles] = expected;
    std::string out;
    const auto compare = [&out](const char* name, auto e, auto a) {
        if (e == a) return;
        const auto str = [](auto x) {
            if constexpr (std::is_floating_point_v<decltype(x)>)
                return shortest_str(x);
            else
                return std::to_string(x);
        };
        out += std::string(out.empty() ? "" : "; ") + name + ": expected " + str(e) + ", got " +
               str(a);
    };
    const auto or_default = [](Index x, Index fallback) { return x ? x : fallback; };
    compare("embed_dim", expected.embed_dim, actual.embed_dim);
    compare("num_heads", expected.num_heads, actual.num_heads);
    compare("bias", expected.bias, actual.bias);
    if (expected.kdim || actual.kdim)
        compare("kdim", or_default(expected.kdim, expected.embed_dim),
                or_default(actual.kdim, actual.embed_dim));
    if (expected.vdim || actual.vdim)
        compare("vdim", or_default(expected.vdim, expected.embed_dim),
                or_default(actual.vdim, actual.embed_dim));
    compare("add_bias_kv", expected.add_bias_kv, actual.add_bias_kv);
    compare("add_zero_attn", expected.add_zero_attn, actual.add_zero_attn);
    compare("dropout", expected.dropout, actual.dropout);
    if (expected.num_kv_heads || actual.num_kv_heads)
        compare("num_kv_heads", or_default(expected.num_kv_heads, expected.num_heads),
                or_default(actual.num_kv_heads, actual.num_heads));
    if (expected.scale || actual.scale)
        compare("scale", attention_scale<T>(expected), attention_scale<T>(actual));
    return out;
}

}  // namespace detail

/// Everything optional that shapes one attention call. Boolean masks: `true` means *may not
/// attend*, as in torch.nn.MultiheadAttention, for every boolean mask of the library.
/// Masks combine: a score is hidden if any mask hides it; attn_bias is added to what is left.
/// A query row that can see no key gets a zero attention row (its output is out_proj.bias) and
/// zero gradients, never NaN. NaN in, NaN out: a NaN in a query, a key, a value or attn_bias
/// gives NaN in the output rows it reaches, masked or not, as in PyTorch.
/// A mask is absent when default-constructed (shape [0]); any other shape is checked, so an
/// empty mask of the wrong shape, e.g. key_padding_mask [0, 4], is an error, not "no mask".
template <class T>
struct AttentionMasks {
    Tensor<bool> attn_mask;            // [L, S] or [B, H, L, S]; default-constructed = none
    Tensor<T> attn_bias;               // additive, [L, S] or [B, H, L, S]; default = none
    Tensor<bool> key_padding_mask;     // [B, S] ([S] for an unbatched call); true = padding
    bool is_causal = false;            // query i may attend key j only if j <= i (top-left aligned)
    bool need_weights = false;         // return the attention weights (costs B*H*L*S memory)
    bool average_attn_weights = true;  // weights [B, L, S] averaged over heads; else [B, H, L, S]

    // How is_causal aligns L queries with S keys: top_left (j <= i, PyTorch's is_causal) or
    // bottom_right (j <= i + S - L: a chunk of new tokens after S - L earlier ones).
    CausalAlignment causal_alignment = CausalAlignment::top_left;
};

/// What one backward call computes besides the parameter gradients, which it always adds.
struct AttentionBackwardOptions {
    bool query = true;  // AttentionGradients::query; false leaves it empty and skips its GEMMs
    bool key = true;    // AttentionGradients::key, likewise
    bool value = true;  // AttentionGradients::value, likewise
    /// Self-attention (one tensor passed as query, key and value): its gradient once, in
    /// AttentionGradients::input (= query + key + value), from one GEMM over the three
    /// projections, with query, key and value left empty; takes precedence over the three
    /// flags. A call that is not self-attention keeps the per-argument form.
    bool combine_self = false;
};

}  // namespace headwise
