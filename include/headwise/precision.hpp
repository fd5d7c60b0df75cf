// SPDX-License-Identifier: MIT
// Precision: the number format a module stores its weights in and multiplies in, for inference.
#pragma once

namespace headwise {

/// How a float module runs its inference products. float32: everything in float (the default,
/// and what training uses). bf16: weights stored in bfloat16 (converted once, half the bytes),
/// activations rounded to bfloat16 at the products' inputs, products accumulated in float,
/// softmax, normalisation and outputs in float; about 3 significant decimal digits, so outputs
/// agree with float to about 1e-2 relative. See docs/precision.md.
enum class Precision { float32, bf16 };

/// "float32" or "bf16".
constexpr const char* to_string(Precision p) noexcept {
    return p == Precision::bf16 ? "bf16" : "float32";
}

}  // namespace headwise
