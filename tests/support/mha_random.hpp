// SPDX-License-Identifier: MIT
// Seeded random MultiheadAttention cases for property tests: configurations, data, parameters.
#pragma once

#include <cstdint>  // std::uint64_t
#include <cstdlib>  // std::getenv, std::strtoull
#include <limits>   // std::numeric_limits
#include <random>   // std::mt19937_64
#include <string>   // std::string
#include <vector>   // std::vector

#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/ops/dropout.hpp>
#include <headwise/random.hpp>

#include "mha_case.hpp"
#include "reference_attention.hpp"

namespace headwise::test {

/// Sets every parameter of `m` (in-projection, its bias, bias_k, bias_v, out_proj weight and
/// bias) to N(0, scale^2) draws from `seed`: a fresh module's zero biases would hide a path that
/// forgets one. Modules with the same options get the same values from the same seed, whatever
/// their projection.
template <class T>
void randomize_parameters(MultiheadAttention<T>& m, std::uint64_t seed, double scale = 0.5) {
    std::mt19937_64 rng(seed);
    auto sd = m.state_dict();
    for (auto& [name, t] : sd)
        for (T& x : t) x = static_cast<T>(scale * normal(rng));
    m.load_state_dict(sd);
}

/// The factor forward's dropout applied to each weight [B, H, L, S'], regenerated from its seed
/// in plain loops: 0 where dropped, 1 / (1 - p) where kept. Weight (i, j) of slice (b, h) is
/// dropped when the 32 bits its counter gives (stream b H + h, row i, column j; ops/dropout.hpp)
/// fall below round(p 2^32).
inline std::vector<double> dropout_factors(const ops::Dropout& dropout, Index B, Index H, Index L,
                                           Index Sx) {
    std::vector<double> f(static_cast<std::size_t>(B * H * L * Sx), 1.0);
    if (!dropout.active()) return f;
    const double keep = 1.0 / (1.0 - dropout.p);
    const auto threshold = static_cast<std::uint64_t>(dropout.p * 4294967296.0 + 0.5);
    for (Index slice = 0; slice < B * H; ++slice) {
        const std::uint64_t key =
            ops::Dropout::stream_seed(dropout.seed, static_cast<std::uint64_t>(slice));
        for (Index i = 0; i < L; ++i) {
            const std::uint64_t row = ops::Dropout::row_key(key, i);
            for (Index j = 0; j < Sx; ++j)
                f[static_cast<std::size_t>((slice * L + i) * Sx + j)] =
                    ops::Dropout::column_bits(row, j) < threshold ? 0.0 : keep;
        }
    }
    return f;
}

/// The dropout factors a forward under configuration `c` must have applied: in training mode the
/// mask of the test's p, c.dropout (not the p the module saved: a module that skipped or changed
/// dropout would check itself), in the stream of the key the forward drew from the module's
/// generator; all ones in eval mode.
template <class T>
std::vector<double> dropout_factors_of(const AttentionForward<T>& f, const MhaConfig& c) {
    const Index B = c.batched ? c.B : 1;
    const Index S = c.inputs == Inputs::self ? c.L : c.S;
    const Index Sx = S + (c.bias_kv ? 1 : 0) + (c.zero_attn ? 1 : 0);
    const ops::Dropout d =
        f.saved ? ops::Dropout{c.dropout, f.saved->call().dropout.seed} : ops::Dropout{};
    return dropout_factors(d, B, c.H, c.L, Sx);
}

/// One random case: a configuration (shapes, options, which tensors are shared) and the masks
/// it combines. Everything follows from `seed`, so `random_case(seed)` replays it.
struct MhaCase {
    std::uint64_t seed = 0;
    MhaConfig config;          // config.masks is unused: the fields below say which masks there are
    int attn_mask = 0;         // 0 none, 2 [L, S], 4 [B, H, L, S]
    int attn_bias = 0;         // 0 none, 2 [L, S], 4 [B, H, L, S]
    bool key_padding = false;  // key_padding_mask [B, S] ([S] unbatched)
    bool causal = false;       // is_causal
    bool masked_row = false;   // one query row with every key hidden
    bool infinite_bias = false;  // some attn_bias entries -inf
    bool training = true;        // else eval mode

    Index S() const { return config.inputs == Inputs::self ? config.L : config.S; }
    Index Sx() const { return S() + (config.bias_kv ? 1 : 0) + (config.zero_attn ? 1 : 0); }

    /// Everything that defines the case, and how to run it alone.
    std::string str() const {
        const char* inputs[] = {"self", "kv_same", "distinct"};
        return "seed=" + std::to_string(seed) + " " + config.str() +
               " inputs=" + inputs[static_cast<int>(config.inputs)] +
               " need_weights=" + std::to_string(config.need_weights) +
               " average=" + std::to_string(config.average) +
               " attn_mask=" + std::to_string(attn_mask) +
               " attn_bias=" + std::to_string(attn_bias) +
               " key_padding=" + std::to_string(key_padding) + " causal=" + std::to_string(causal) +
               " masked_row=" + std::to_string(masked_row) +
               " infinite_bias=" + std::to_string(infinite_bias) +
               " training=" + std::to_string(training) +
               " (replay: HEADWISE_PROPERTY_SEED=" + std::to_string(seed) + ")";
    }
};

/// A random case from `seed`: B 1..3, L and S 1..5, E from 1 to 12 with H any divisor of E (1 to
/// E), kdim/vdim free where the inputs allow, every mask kind and combination, causal (either
/// alignment), a chosen scale, bias on or off, bias_kv, zero_attn, dropout, batched or not,
/// need_weights averaged or per head or not at all, training or eval. Sizes stay small so hundreds
/// of cases run in seconds.
inline MhaCase random_case(std::uint64_t seed) {
    std::mt19937_64 rng(seed ^ 0x5DEECE66Dull);
    const auto pick = [&](Index lo, Index hi) {  // uniform in [lo, hi]
        return lo + static_cast<Index>(uniform01(rng) * static_cast<double>(hi - lo + 1));
    };
    const auto chance = [&](double p) { return bernoulli(rng, p); };
    MhaCase k;
    k.seed = seed;
    MhaConfig& c = k.config;
    c.batched = chance(0.8);
    c.B = c.batched ? pick(1, 3) : 1;
    const Index sizes[] = {1, 2, 3, 4, 6, 8, 12};
    c.E = sizes[pick(0, 6)];
    std::vector<Index> divisors;
    for (Index h = 1; h <= c.E; ++h)
        if (c.E % h == 0) divisors.push_back(h);
    c.H = divisors[static_cast<std::size_t>(pick(0, static_cast<Index>(divisors.size()) - 1))];
    c.L = pick(1, 5);
    const Index kind = pick(0, 2);
    c.inputs = kind == 0 ? Inputs::self : (kind == 1 ? Inputs::kv_same : Inputs::distinct);
    c.S = c.inputs == Inputs::self ? c.L : pick(1, 5);
    c.kdim = c.vdim = 0;
    if (c.inputs == Inputs::kv_same && chance(0.5)) c.kdim = c.vdim = pick(1, 7);
    if (c.inputs == Inputs::distinct) {
        if (chance(0.5)) c.kdim = pick(1, 7);
        if (chance(0.5)) c.vdim = pick(1, 7);
    }
    c.bias = chance(0.75);
    c.bias_kv = chance(0.3);
    c.zero_attn = chance(0.3);
    c.need_weights = chance(0.5);
    c.average = chance(0.5);
    const double rates[] = {0.1, 0.3, 0.6};
    c.dropout = chance(0.4) ? rates[pick(0, 2)] : 0.0;
    c.masks = MaskKind::none;
    const int ranks[] = {0, 0, 2, 4};
    k.attn_mask = ranks[pick(0, 3)];
    k.attn_bias = ranks[pick(0, 3)];
    k.key_padding = chance(0.35);
    k.causal = chance(0.25);
    if (k.causal && chance(0.4)) c.alignment = CausalAlignment::bottom_right;
    if (chance(0.2)) c.scale = uniform_scalar(rng, 0.1, 1.5);
    k.masked_row = (k.attn_mask != 0 || k.key_padding) && chance(0.3);
    k.infinite_bias = k.attn_bias != 0 && chance(0.25);
    k.training = chance(0.75);
    return k;
}

/// Inputs and masks of a case, drawn from its seed (the same values for float and double, up to
/// rounding). Masks hide about 30% of the scores; `masked_row` hides every key of one row.
template <class T>
MhaData<T> make_case_data(const MhaCase& k) {
    const MhaConfig& c = k.config;
    MhaData<T> d = make_data<T>(c, k.seed);  // q, k, v; no masks (config.masks is none)
    std::mt19937_64 rng(k.seed * 0x9E3779B97F4A7C15ull + 1);
    const Index B = c.batched ? c.B : 1, S = k.S();
    const auto bools = [&](const Shape& s) {
        Tensor<bool> m(s);
        for (bool& x : m) x = bernoulli(rng, 0.3);
        return m;
    };
    const auto shape_of = [&](int rank) {
        return rank == 2 ? Shape{c.L, S} : Shape{B, c.H, c.L, S};
    };
    if (k.attn_mask) d.masks.attn_mask = bools(shape_of(k.attn_mask));
    if (k.attn_bias) {
        d.masks.attn_bias = Tensor<T>::randn(shape_of(k.attn_bias), rng);
        if (k.infinite_bias)
            for (T& x : d.masks.attn_bias)
                if (bernoulli(rng, 0.2)) x = -std::numeric_limits<T>::infinity();
    }
    if (k.key_padding) d.masks.key_padding_mask = bools(c.batched ? Shape{B, S} : Shape{S});
    if (k.masked_row) {
        const Index i = static_cast<Index>(uniform01(rng) * static_cast<double>(c.L));
        if (k.attn_mask == 2) {
            for (Index j = 0; j < S; ++j) d.masks.attn_mask(i, j) = true;
        } else if (k.attn_mask == 4) {
            for (Index j = 0; j < S; ++j) d.masks.attn_mask(B - 1, c.H - 1, i, j) = true;
        } else {  // key padding: every query row of the last batch entry sees nothing
            for (Index j = 0; j < S; ++j) d.masks.key_padding_mask.data()[(B - 1) * S + j] = true;
        }
    }
    d.masks.is_causal = k.causal;
    d.masks.need_weights = c.need_weights;
    d.masks.average_attn_weights = c.average;
    return d;
}

/// The cases a property test runs: HEADWISE_PROPERTY_SEED=<seed> replays one case, otherwise
/// seeds 1..count, where count is HEADWISE_PROPERTY_CASES if set, else `default_count`.
inline std::vector<std::uint64_t> property_seeds(std::uint64_t default_count) {
    if (const char* one = std::getenv("HEADWISE_PROPERTY_SEED"))
        return {std::strtoull(one, nullptr, 10)};
    std::uint64_t count = default_count;
    if (const char* n = std::getenv("HEADWISE_PROPERTY_CASES"))
        count = std::strtoull(n, nullptr, 10);
    std::vector<std::uint64_t> seeds;
    for (std::uint64_t s = 1; s <= count; ++s) seeds.push_back(s);
    return seeds;
}

/// Averages per-head weights [B, H, L, S'] over heads, as need_weights with
/// average_attn_weights does: [B, L, S'].
inline std::vector<double> average_heads(const std::vector<double>& w, Index B, Index H, Index L,
                                         Index Sx) {
    std::vector<double> avg(static_cast<std::size_t>(B * L * Sx), 0.0);
    for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h)
            for (Index k = 0; k < L * Sx; ++k)
                avg[static_cast<std::size_t>(b * L * Sx + k)] +=
                    w[static_cast<std::size_t>((b * H + h) * L * Sx + k)] / static_cast<double>(H);
    return avg;
}

/// The reference's weights shaped as the module returns them for configuration `c`: averaged
/// [B, L, S'] or per head [B, H, L, S'], without the batch axis for an unbatched call.
inline Tensor<double> reference_weights(const MhaConfig& c, const ReferenceAttention& r) {
    const Index B = c.batched ? c.B : 1;
    Tensor<double> w =
        c.average ? Tensor<double>(Shape{B, c.L, r.Sx}, average_heads(r.weights, B, c.H, c.L, r.Sx))
                  : Tensor<double>(Shape{B, c.H, c.L, r.Sx}, r.weights);
    if (!c.batched) w = std::move(w).reshape(w.shape().drop_front());
    return w;
}

}  // namespace headwise::test
