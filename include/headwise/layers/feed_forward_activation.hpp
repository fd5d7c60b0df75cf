// SPDX-License-Identifier: MIT
// Activation: the feed-forward activation of the transformer encoder and decoder layers.
#pragma once

namespace headwise {

/// The feed-forward activation of the encoder and decoder layers: torch's activation="relu" or
/// "gelu" (the exact erf form).
enum class Activation { relu, gelu };

inline const char* to_string(Activation a) noexcept {
    switch (a) {
        case Activation::relu:
            return "relu";
        case Activation::gelu:
            return "gelu";
    }
    return "unknown";
}

}  // namespace headwise
