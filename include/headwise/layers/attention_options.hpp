// SPDX-License-Identifier: MIT
// Forwards to layers/attention/options.hpp: Projection, MultiheadAttentionOptions, AttentionMasks.
#pragma once

#include "attention/options.hpp"
