// SPDX-License-Identifier: MIT
// headwise::uninitialized: the tag that constructs a layer without drawing initial weights.
#pragma once

namespace headwise {

/// Tag type of headwise::uninitialized.
struct uninitialized_t {
    explicit constexpr uninitialized_t() = default;
};

/// Passed to a layer's constructor (Linear, Embedding) in place of a random generator: the
/// parameters are allocated but not written (their values are unspecified until loaded, e.g. by
/// load_state_dict), and the gradient buffers are allocated on first use (backward, zero_grad,
/// parameters(), grad_dict(), the grad_* accessors; load_state_dict too, as it goes through
/// parameters()). A loader that writes through weight() and bias() (as
/// models::BertModel::from_pretrained does) thus neither draws weights it overwrites nor holds
/// gradient memory an inference-only model never uses.
inline constexpr uninitialized_t uninitialized{};

}  // namespace headwise
