// SPDX-License-Identifier: MIT
// Explicit instantiation declarations of the layers the test files share, defined once in
// instantiations.cpp.
#pragma once

#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/layers/embedding.hpp>
#include <headwise/layers/layer_norm.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/rms_norm.hpp>
#include <headwise/layers/swiglu.hpp>
#include <headwise/layers/transformer_decoder_layer.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>

// Why: compile time. Each test file that runs a layer used to instantiate all of it, for float
// and double: MultiheadAttention was 36 s of the 41.8 s test_mha_properties.cpp took in the dev
// build, Linear 13 s of test_linear.cpp; the tape's tests, which run every layer through
// autograd::apply, took 80 s each under the sanitizers (test_tape_gpt.cpp: 79.5 s -> 38.6 s with
// this header). Declared extern here, the members defined outside the class are compiled once,
// in instantiations.cpp (the library headwise_test_instantiations, which every test links).
// Include this header before any code that uses the classes. A test that compiles the library
// under other macros (test_kv_cache.cpp: EIGEN_RUNTIME_NO_MALLOC) must not include it: it would
// run instantiations compiled without them.
namespace headwise {

extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;
extern template class Linear<float>;
extern template class Linear<double>;
extern template class LayerNorm<float>;
extern template class LayerNorm<double>;
extern template class RMSNorm<float>;
extern template class RMSNorm<double>;
extern template class Embedding<float>;
extern template class Embedding<double>;
extern template class SwiGLU<float>;
extern template class SwiGLU<double>;
extern template class TransformerEncoderLayer<float>;
extern template class TransformerEncoderLayer<double>;
extern template class TransformerDecoderLayer<float>;
extern template class TransformerDecoderLayer<double>;

}  // namespace headwise
