// SPDX-License-Identifier: MIT
// The one explicit instantiation, for double, of each template that instantiations.hpp declares
// extern (instantiations.cpp holds the float ones).
#include "support/instantiations.hpp"

namespace headwise {
HEADWISE_DEFINE_INSTANTIATIONS(double)
}  // namespace headwise
