// SPDX-License-Identifier: MIT
// Explicit instantiation declarations of the layers the test files share, defined once in
// instantiations.cpp.
#pragma once

#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/layers/linear.hpp>

// Why: compile time. Each test file that runs a layer used to instantiate all of it, for float
// and double: MultiheadAttention was 36 s of the 41.8 s test_mha_properties.cpp took in the dev
// build, Linear 13 s of test_linear.cpp. Declared extern here, the members defined outside the
// class are compiled once, in instantiations.cpp (the library headwise_test_instantiations, which
// every test links). Only what pays is here: LayerNorm, Embedding, the encoder layer and the
// optimisers are each cheap or used by one file. Include this header before any code that uses
// the classes. A test that compiles the library under other macros (test_kv_cache.cpp:
// EIGEN_RUNTIME_NO_MALLOC) must not include it: it would run instantiations compiled without them.
namespace headwise {

extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;
extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace headwise
