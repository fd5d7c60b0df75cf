// SPDX-License-Identifier: MIT
// The one explicit instantiation, for float, of each template that instantiations.hpp declares
// extern; instantiations_double.cpp holds the double ones (two files build in parallel).
#include "support/instantiations.hpp"

namespace headwise {
HEADWISE_DEFINE_INSTANTIATIONS(float)
}  // namespace headwise
