// SPDX-License-Identifier: MIT
// What a MultiheadAttention is built from and called with: options, projection choice, masks.
#pragma once

#include <optional>  // std::optional

#include "../../config.hpp"
#include "../../detail/compiled_templates.hpp"
#include "../../ops/blocked_attention.hpp"
#include "../../ops/rope.hpp"
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

/// Which attention kernel MultiheadAttention runs for each (batch, head) slice. Both give the
/// same outputs, gradients and dropout masks (to rounding); they differ in memory and speed.
enum class AttentionKernel {
    /// `blocked` unless the call asks for the attention weights (need_weights), or the sequences
    /// are short (L Sx <= kMaterialisedMaxScores = 512 * 512 scores per slice), where the
    /// materialised kernel is the faster one: its backward does one product less, and its [L, Sx]
    /// slice (at most 1 MiB in float) still fits the cache.
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

/// Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer"), as Llama-family models use
/// them: each head's queries and keys are rotated pair by pair by the angle (m / scaling_factor)
/// theta^(-2i / D), m the token's position, right after the in-projection, so that the scores
/// q_m . k_n depend on m - n only. The values are not rotated. Positions: forward gives query i
/// position i and key j position j (0..L-1 and 0..S-1, also for cross-attention, whatever the
/// masks); decode gives a new token the number of non-padding tokens before it in its sequence,
/// as Hugging Face's position_ids = cumsum(attention_mask) - 1, so that left padding shifts no
/// position and the KV cache holds rotated keys. The appended bias_k and zero-attention keys are
/// not rotated (they have no position).
struct RotaryEmbedding {
    bool enabled = false;  // off: no rotation, the fields below unused
    /// Base of the frequencies theta_i = theta^(-2i / D) (Hugging Face's rope_theta); finite and
    /// greater than 1.
    double theta = 10000.0;
    /// Which features form the rotated pairs: rotate_half (i, i + D/2), Hugging Face's Llama
    /// convention, or interleaved (2i, 2i + 1), the RoFormer paper's and GPT-J's. D must be even.
    RopeConvention convention = RopeConvention::rotate_half;
    /// Linear scaling (position interpolation; Hugging Face's rope_scaling {"rope_type":
    /// "linear", "factor": f}): positions are divided by it. Finite and at least 1.
    double scaling_factor = 1.0;
    /// Frequencies changed for long contexts: Llama 3.1's smoothing, dynamic NTK or YaRN (see
    /// RopeScalingType; Hugging Face's rope_type "llama3", "dynamic", "yarn"). none by default.
    RopeScaling scaling;
};

/// The constructor arguments of torch.nn.MultiheadAttention (batch_first is always true here).
struct MultiheadAttentionOptions {
    Index embed_dim = 0;  // E
    Index num_heads = 1;  // H; must divide E unless head_dim is set; D = E / H by default
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

    // Rotary position embeddings on the queries and keys (see RotaryEmbedding); off by default.
    RotaryEmbedding rotary;

    // Features per head D; 0 means embed_dim / num_heads (num_heads must then divide embed_dim).
    // Set, the attention's inner width H D may differ from E (Qwen3 and Gemma configurations whose
    // head_dim is not hidden_size / num_attention_heads; a module with pruned heads): Q has H D
    // features, K and V Hkv D, in_proj_weight is [H D + 2 Hkv D, E], out_proj.weight [E, H D],
    // and the default scale is 1 / sqrt(D).
    Index head_dim = 0;
};

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

    // Per-head gates xi (Michel et al. 2019; Hugging Face's head_mask): head h's attention
    // probabilities, after dropout, are multiplied by head_mask[h] ([H], the same for every batch)
    // or head_mask[b, h] ([B, H]), hence its output before the out-projection: 0 removes the
    // head, 1 leaves it as it is. The weights need_weights returns are the gated ones (averaged:
    // the mean of the gated heads). Default-constructed: no gate.
    Tensor<T> head_mask;
    // Set (not empty), the backward of this training forward adds d loss / d xi into it, of
    // head_mask's shape ([H] or [B, H] when head_mask is absent, which then gates with ones):
    // Michel et al.'s importance of head h is the mean of |d loss / d xi_h| over batches. Like a
    // parameter gradient it accumulates until the caller zeroes it; its memory must stay alive
    // until that backward has run. Ignored in eval mode.
    TensorView<T> head_mask_grad;
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

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_ATTENTION_OPTIONS_TEMPLATES(C, F, T) C(struct, AttentionMasks<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_ATTENTION_OPTIONS_TEMPLATES);
