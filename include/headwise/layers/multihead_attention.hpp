// SPDX-License-Identifier: MIT
// Forwards to layers/attention/multihead_attention.hpp, where MultiheadAttention<T> lives.
#pragma once

#include "attention/multihead_attention.hpp"
