// SPDX-License-Identifier: MIT
// The checks and defaults behind MultiheadAttentionOptions: validation, the in-projection layout,
// the scale, and the options a backward compares with its forward's.
#pragma once

#include <cmath>        // std::abs, std::sqrt, std::isfinite
#include <cstdio>       // std::snprintf
#include <cstdlib>      // std::strtod
#include <limits>       // std::numeric_limits
#include <optional>     // std::optional
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_floating_point_v, std::is_same_v

#include "../../../config.hpp"
#include "../../../detail/number_string.hpp"
#include "../../../error.hpp"
#include "../../../ops/blocked_attention.hpp"
#include "../../../shape.hpp"
#include "../../../tensor.hpp"
#include "../options.hpp"
#include "in_proj_layout.hpp"

namespace headwise::detail {

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

/// "float" or "double", for messages.
template <class T>
const char* scalar_type_name() noexcept {
    return std::is_same_v<T, float> ? "float" : "double";
}

/// The head dimension D of `o`: options.head_dim, or embed_dim / num_heads when it is 0.
inline Index resolved_head_dim(const MultiheadAttentionOptions& o) noexcept {
    return o.head_dim ? o.head_dim : o.embed_dim / o.num_heads;
}

/// The factor of the scores Q K^T, in T: options.scale, or 1 / sqrt(D) when it is unset.
template <class T>
T attention_scale(const MultiheadAttentionOptions& o) {
    return o.scale ? static_cast<T>(*o.scale)
                   : T(1) / std::sqrt(static_cast<T>(resolved_head_dim(o)));
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
/// taken from another option (kdim and vdim 0: embed_dim; num_kv_heads 0: num_heads; head_dim
/// 0: embed_dim / num_heads; scale unset: 1 / sqrt(D)) is compared when either module sets it; when
/// neither does, it differs only if the option it comes from does, which is named instead. The
/// scale is compared in T, the type the kernels use. The rotary settings (theta, convention,
/// scaling_factor) are compared when both modules rotate; otherwise rotary.enabled names the
/// difference. Not compared: projection, attention_kernel, attention_tiles and reference_inputs
/// choose how a forward runs, not what it computes (tiles: only the order of sums), and the forward
/// saves its choice for backward to follow.
template <class T>
std::string differing_options(const MultiheadAttentionOptions& expected,
                              const MultiheadAttentionOptions& actual) {
    // Names every field: adding one to MultiheadAttentionOptions stops this from compiling until
    // it is sorted here into compared or not compared.
    [[maybe_unused]] const auto& [embed_dim, num_heads, projection, bias, kdim, vdim, add_bias_kv,
                                  add_zero_attn, dropout, reference_inputs, num_kv_heads, scale,
                                  attention_kernel, attention_tiles, rotary, head_dim] = expected;
    std::string out;
    const auto compare = [&out](const char* name, auto e, auto a) {
        if (e == a) return;
        const auto str = [](auto x) {
            if constexpr (std::is_floating_point_v<decltype(x)>)
                return shortest_str(x);
            else if constexpr (std::is_same_v<decltype(x), RopeConvention>)
                return std::string(to_string(x));
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
    if (expected.head_dim || actual.head_dim)
        compare("head_dim", resolved_head_dim(expected), resolved_head_dim(actual));
    if (expected.num_kv_heads || actual.num_kv_heads)
        compare("num_kv_heads", or_default(expected.num_kv_heads, expected.num_heads),
                or_default(actual.num_kv_heads, actual.num_heads));
    if (expected.scale || actual.scale)
        compare("scale", attention_scale<T>(expected), attention_scale<T>(actual));
    // The rotation's settings matter only when either module rotates.
    compare("rotary.enabled", expected.rotary.enabled, actual.rotary.enabled);
    if (expected.rotary.enabled && actual.rotary.enabled) {
        compare("rotary.theta", expected.rotary.theta, actual.rotary.theta);
        compare("rotary.convention", expected.rotary.convention, actual.rotary.convention);
        compare("rotary.scaling_factor", expected.rotary.scaling_factor,
                actual.rotary.scaling_factor);
        const RopeScaling &se = expected.rotary.scaling, &sa = actual.rotary.scaling;
        const auto described = [](const RopeScaling& s) {
            std::string d = std::string(to_string(s.type)) + " (factor " + shortest_str(s.factor);
            if (!s.frequency_factors.empty())
                d += ", " + std::to_string(s.frequency_factors.size()) + " frequency factors";
            return d + ")";
        };
        if (se != sa)
            out += std::string(out.empty() ? "" : "; ") + "rotary.scaling: expected " +
                   described(se) + ", got " + described(sa);
    }
    return out;
}

/// Throws std::invalid_argument unless `rotary` (when enabled) can rotate heads of D features:
/// D even, theta finite and greater than 1, scaling_factor finite and at least 1, a convention
/// that is an enumerator, a scaling check_rope_scaling accepts with no or D/2
/// frequency_factors.
inline void check_rotary(const char* fn, const RotaryEmbedding& rotary, Index D) {
    if (!rotary.enabled) return;
    if (D % 2 != 0)
        throw_invalid_argument(fn, "options.rotary.enabled",
                               "needs an even head dimension D (head_dim, or embed_dim / "
                               "num_heads when it is 0; RoPE rotates pairs of features)",
                               "D = " + std::to_string(D));
    if (!(std::isfinite(rotary.theta) && rotary.theta > 1.0))
        throw_invalid_argument(fn, "options.rotary.theta", "must be finite and greater than 1",
                               shortest_str(rotary.theta));
    if (!(std::isfinite(rotary.scaling_factor) && rotary.scaling_factor >= 1.0))
        throw_invalid_argument(fn, "options.rotary.scaling_factor", "must be finite and at least 1",
                               shortest_str(rotary.scaling_factor));
    if (rotary.convention != RopeConvention::rotate_half &&
        rotary.convention != RopeConvention::interleaved)
        throw_invalid_argument(
            fn, "options.rotary.convention", "must be rotate_half or interleaved",
            "RopeConvention(" + std::to_string(static_cast<int>(rotary.convention)) + ")");
    ops::check_rope_scaling(fn, "options.rotary.scaling", rotary.scaling);
    if (const auto n = static_cast<Index>(rotary.scaling.frequency_factors.size());
        n != 0 && n != D / 2)
        throw_invalid_argument(fn, "options.rotary.scaling.frequency_factors",
                               "must be empty or hold one factor per rotated pair (D / 2 = " +
                                   std::to_string(D / 2) + ")",
                               std::to_string(n) + " factors");
}

/// Throws std::invalid_argument naming the first option a MultiheadAttention cannot be built
/// with: sizes not positive, num_heads or num_kv_heads not dividing, dropout outside [0, 1), a
/// scale T cannot hold, a projection that is no enumerator, empty tiles, rotary settings
/// check_rotary refuses.
template <class T>
void check_options(const char* fn, const MultiheadAttentionOptions& options) {
    if (options.embed_dim <= 0)
        throw_invalid_argument(fn, "options.embed_dim", "must be positive",
                               std::to_string(options.embed_dim));
    if (options.num_heads <= 0)
        throw_invalid_argument(fn, "options.num_heads", "must be positive",
                               std::to_string(options.num_heads));
    if (options.head_dim < 0)
        throw_invalid_argument(fn, "options.head_dim",
                               "must be positive, or 0 for embed_dim / num_heads",
                               std::to_string(options.head_dim));
    if (options.head_dim == 0 && options.embed_dim % options.num_heads != 0)
        throw_invalid_argument(fn, "options.num_heads",
                               "must divide embed_dim = " + std::to_string(options.embed_dim),
                               std::to_string(options.num_heads));
    if (options.kdim < 0)
        throw_invalid_argument(fn, "options.kdim", "must be positive, or 0 for embed_dim",
                               std::to_string(options.kdim));
    if (options.vdim < 0)
        throw_invalid_argument(fn, "options.vdim", "must be positive, or 0 for embed_dim",
                               std::to_string(options.vdim));
    if (!(options.dropout >= 0.0 && options.dropout < 1.0))
        throw_invalid_argument(fn, "options.dropout", "must be in [0, 1)",
                               std::to_string(options.dropout));
    if (options.num_kv_heads < 0 ||
        (options.num_kv_heads > 0 && options.num_heads % options.num_kv_heads != 0))
        throw_invalid_argument(fn, "options.num_kv_heads",
                               "must divide num_heads = " + std::to_string(options.num_heads) +
                                   ", or be 0 for num_heads",
                               std::to_string(options.num_kv_heads));
    check_scale<T>(fn, options.scale);
    check_projection(fn, "options.projection", options.projection);
    check_tiles(fn, options.attention_tiles, "options.attention_tiles");
    check_rotary(fn, options.rotary, resolved_head_dim(options));
}

/// The in-projection layout of checked `options`, the defaults resolved (kdim, vdim 0: E;
/// num_kv_heads 0: H; head_dim 0: E / H). Throws std::invalid_argument when the largest parameter,
/// the in-projection [E, E + kdim + vdim] (out_proj is [E, E], the biases 3E), would have more
/// elements or bytes than an Index counts.
template <class T>
InProjLayout make_in_proj_layout(const char* fn, const MultiheadAttentionOptions& options) {
    InProjLayout layout;
    layout.E = options.embed_dim;
    layout.H = options.num_heads;
    layout.D = resolved_head_dim(options);
    layout.kdim = options.kdim ? options.kdim : layout.E;
    layout.vdim = options.vdim ? options.vdim : layout.E;
    layout.kv_heads = options.num_kv_heads ? options.num_kv_heads : layout.H;
    Index in_features = 0, elements = 0, bytes = 0;
    if (__builtin_add_overflow(layout.E, layout.kdim, &in_features) ||
        __builtin_add_overflow(in_features, layout.vdim, &in_features) ||
        __builtin_mul_overflow(layout.E, in_features, &elements) ||
        __builtin_mul_overflow(elements, static_cast<Index>(sizeof(T)), &bytes))
        throw std::invalid_argument(
            std::string(fn) + ": options: embed_dim = " + std::to_string(layout.E) +
            ", kdim = " + std::to_string(layout.kdim) + ", vdim = " + std::to_string(layout.vdim) +
            ": the in-projection weights [embed_dim, embed_dim + kdim + vdim] overflow the "
            "address space");
    // With head_dim set the widths are H D and Hkv D: the in-projection Wq [H D, E],
    // Wk [Hkv D, kdim], Wv [Hkv D, vdim] and out_proj [E, H D] must be countable too.
    Index inner = 0, kv = 0, q_elements = 0, k_elements = 0, v_elements = 0, out_elements = 0;
    if (__builtin_mul_overflow(layout.H, layout.D, &inner) ||
        __builtin_mul_overflow(layout.kv_heads, layout.D, &kv) ||
        __builtin_mul_overflow(inner, layout.E, &q_elements) ||
        __builtin_mul_overflow(kv, layout.kdim, &k_elements) ||
        __builtin_mul_overflow(kv, layout.vdim, &v_elements) ||
        __builtin_add_overflow(q_elements, k_elements, &elements) ||
        __builtin_add_overflow(elements, v_elements, &elements) ||
        __builtin_mul_overflow(elements, static_cast<Index>(sizeof(T)), &bytes) ||
        __builtin_mul_overflow(inner, layout.E, &out_elements) ||
        __builtin_mul_overflow(out_elements, static_cast<Index>(sizeof(T)), &bytes))
        throw std::invalid_argument(std::string(fn) +
                                    ": options: num_heads = " + std::to_string(layout.H) +
                                    ", head_dim = " + std::to_string(layout.D) +
                                    ", embed_dim = " + std::to_string(layout.E) +
                                    ": the weights [num_heads head_dim, embed_dim] overflow "
                                    "the address space");
    return layout;
}

}  // namespace headwise::detail
