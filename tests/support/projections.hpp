// SPDX-License-Identifier: MIT
// The projections every attention test runs over, listed once.
#pragma once

#include <array>

#include <headwise/layers/attention/options.hpp>

namespace headwise::test {

/// The three ways MultiheadAttention computes Q, K and V from the same parameters: one fused
/// [3E, E] product, three [E, E] products, and 3H per-head [E, D] products. A test that claims the
/// three agree loops over this list (`for (Projection p : kProjections)`, or
/// `GENERATE(from_range(kProjections))`), so that a fourth projection joins every such test.
inline constexpr std::array<Projection, 3> kProjections{Projection::fused, Projection::separate,
                                                        Projection::per_head};

}  // namespace headwise::test
