// SPDX-License-Identifier: MIT
// Explicit instantiation declarations of every template the headers compile into
// headwise::compiled (detail/compiled_templates.hpp), defined once in instantiations.cpp.
#pragma once

// Each header then declares its own compiled templates extern, as with HEADWISE_COMPILED.
#define HEADWISE_DETAIL_EXTERN 1
#include <headwise/extern_templates.hpp>

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
