// SPDX-License-Identifier: MIT
// Explicit instantiation declarations of everything headwise/detail/instantiation_list.hpp lists
// (the list headwise::compiled uses), defined once in instantiations.cpp.
#pragma once

#include <headwise/detail/instantiation_list.hpp>

// Why: compile time. Each test file that runs a layer used to instantiate all of it, for float
// and double: MultiheadAttention was 36 s of the 41.8 s test_mha_properties.cpp took in the dev
// build, Linear 13 s of test_linear.cpp; the tape's tests, which run every layer through
// autograd::apply, took 80 s each under the sanitizers (test_tape_gpt.cpp: 79.5 s -> 38.6 s with
// this header). Declared extern here, the members defined outside the class are compiled once,
// in instantiations.cpp (the library headwise_test_instantiations, which every test links).
// The tests do not link headwise::compiled: their instantiations are compiled with the tests'
// own flags and sanitizers. Include this header before any code that uses the classes. A test
// that compiles the library under other macros (test_kv_cache.cpp: EIGEN_RUNTIME_NO_MALLOC) must
// not include it: it would run instantiations compiled without them.
namespace headwise {
HEADWISE_DECLARE_INSTANTIATIONS()
}  // namespace headwise
