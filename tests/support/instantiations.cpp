// SPDX-License-Identifier: MIT
// The one explicit instantiation of each class template that instantiations.hpp declares extern.
#include "support/instantiations.hpp"

namespace headwise {

template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
template class Linear<float>;
template class Linear<double>;
template class LayerNorm<float>;
template class LayerNorm<double>;
template class RMSNorm<float>;
template class RMSNorm<double>;
template class Embedding<float>;
template class Embedding<double>;
template class SwiGLU<float>;
template class SwiGLU<double>;
template class TransformerEncoderLayer<float>;
template class TransformerEncoderLayer<double>;
template class TransformerDecoderLayer<float>;
template class TransformerDecoderLayer<double>;

}  // namespace headwise
