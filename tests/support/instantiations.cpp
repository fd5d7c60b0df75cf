// SPDX-License-Identifier: MIT
// The one explicit instantiation of each class template that instantiations.hpp declares extern.
#include "support/instantiations.hpp"

namespace headwise {

template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
template class Linear<float>;
template class Linear<double>;

}  // namespace headwise
