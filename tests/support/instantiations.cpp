// SPDX-License-Identifier: MIT
// The one explicit instantiation, for float, of each template that instantiations.hpp declares
// extern; instantiations_double.cpp holds the double ones (two files build in parallel).
#define HEADWISE_DETAIL_INSTANTIATE float
#include <headwise/extern_templates.hpp>
