// SPDX-License-Identifier: MIT
// The tests' precompiled header (tests/CMakeLists.txt): what every test file that includes
// support/instantiations.hpp or <headwise/headwise.hpp> reads first. Parsed once per build and
// optimisation level instead of once per test file; the test files still include what they use
// themselves.
#pragma once

#include "support/catch.hpp"
#include "support/instantiations.hpp"  // first: declares the shared instantiations extern

#include <headwise/headwise.hpp>  // for the files that include the umbrella header
