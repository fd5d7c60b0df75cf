// SPDX-License-Identifier: MIT
// The translation unit that carries the tests' precompiled header (support/precompiled.hpp) for
// each optimisation level; it defines nothing.
#include "support/precompiled.hpp"
