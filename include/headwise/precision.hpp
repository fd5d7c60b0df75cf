// SPDX-License-Identifier: MIT
// Precision: the number format a module multiplies in (inference and mixed-precision training).
#pragma once

namespace headwise {

/// How a float module runs its products with weights. float32: everything in float (the
/// default). bf16: weights copied to bfloat16 (converted once for inference; in training mode
/// the float master weights rounded anew each forward), activations and gradients rounded to
/// bfloat16 at the products' inputs, products accumulated in float; softmax, normalisation,
/// outputs, gradients and optimiser state in float (mixed-precision training as PyTorch's
/// autocast on CPU). About 3 significant decimal digits, so outputs agree with float to about
/// 1e-2 relative. See docs/precision.md.
enum class Precision { float32, bf16 };

/// "float32" or "bf16".
constexpr const char* to_string(Precision p) noexcept {
    return p == Precision::bf16 ? "bf16" : "float32";
}

}  // namespace headwise
