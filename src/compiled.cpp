// SPDX-License-Identifier: MIT
// The headwise::compiled library: the one explicit instantiation of each layer that
// headwise/extern_templates.hpp declares extern.
#include <headwise/extern_templates.hpp>

#if !defined(HEADWISE_COMPILED)
#error "src/compiled.cpp is built by the headwise::compiled target, which defines HEADWISE_COMPILED"
#endif

namespace headwise {

template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
template class TransformerEncoderLayer<float>;
template class TransformerEncoderLayer<double>;
template class TransformerDecoderLayer<float>;
template class TransformerDecoderLayer<double>;
template class Linear<float>;
template class Linear<double>;
template class LayerNorm<float>;
template class LayerNorm<double>;
template class RMSNorm<float>;
template class RMSNorm<double>;
template class SwiGLU<float>;
template class SwiGLU<double>;
template class Embedding<float>;
template class Embedding<double>;

}  // namespace headwise
