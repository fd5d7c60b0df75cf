// SPDX-License-Identifier: MIT
// Explicit instantiation declarations of the layers for float and double, for programs that link
// headwise::compiled, which compiles those instantiations once.
#pragma once

#include "layers/attention/multihead_attention.hpp"
#include "layers/embedding.hpp"
#include "layers/layer_norm.hpp"
#include "layers/linear.hpp"
#include "layers/rms_norm.hpp"
#include "layers/swiglu.hpp"
#include "layers/transformer_decoder_layer.hpp"
#include "layers/transformer_encoder_layer.hpp"

// Why: compile time. A translation unit that runs MultiheadAttention otherwise instantiates all of
// it, forward and backward, for each scalar it uses: most of the ten seconds or more a one-module
// program takes to compile. Declared extern here, the members are compiled once, into the
// headwise::compiled library (src/compiled.cpp), and a user's program only parses the headers.
// HEADWISE_COMPILED is defined by that CMake target; without it this header declares nothing, so
// a program that does not link the library still instantiates what it uses, as before.
#if defined(HEADWISE_COMPILED)
namespace headwise {

extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;
extern template class TransformerEncoderLayer<float>;
extern template class TransformerEncoderLayer<double>;
extern template class TransformerDecoderLayer<float>;
extern template class TransformerDecoderLayer<double>;
extern template class Linear<float>;
extern template class Linear<double>;
extern template class LayerNorm<float>;
extern template class LayerNorm<double>;
extern template class RMSNorm<float>;
extern template class RMSNorm<double>;
extern template class SwiGLU<float>;
extern template class SwiGLU<double>;
extern template class Embedding<float>;
extern template class Embedding<double>;

}  // namespace headwise
#endif
