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

/// What with_precision(Precision::bf16, ...) does with a float module's weight matrices (those
/// its bf16 products multiply by: Linear's weight, MultiheadAttention's in- and out-projection
/// weights). keep (the default): the float weights, their gradients and every view of them
/// stay; the bf16 copies come on top (1.5x the float weights' bytes), and the module trains in
/// mixed precision. release: for inference only. The bf16 copies are taken as with keep, then
/// the float weight matrices and their gradient buffers are freed, so those weights take half
/// the bytes of float (biases, norms and embeddings stay float). Forward, decode and the KV
/// caches give the results of a module switched with keep, bit for bit; every call that would
/// need a released float weight (backward, parameters(), state_dict(), load_state_dict(),
/// zero_grad(), the weight accessors, with_precision(Precision::bf16, FloatWeights::keep), ...)
/// throws std::logic_error naming itself before anything changes.
/// with_precision(Precision::float32) brings float weights back, widened exactly from the bf16
/// values: trainable again, but the rounding to bf16 is not undone. With Precision::float32
/// the argument is only checked (a value that is no enumerator throws std::invalid_argument).
/// See docs/precision.md.
enum class FloatWeights { keep, release };

/// "float32" or "bf16".
constexpr const char* to_string(Precision p) noexcept {
    return p == Precision::bf16 ? "bf16" : "float32";
}

/// "keep" or "release".
constexpr const char* to_string(FloatWeights w) noexcept {
    return w == FloatWeights::release ? "release" : "keep";
}

}  // namespace headwise
