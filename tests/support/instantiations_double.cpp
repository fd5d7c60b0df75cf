// SPDX-License-Identifier: MIT
// The one explicit instantiation, for double, of each template that instantiations.hpp declares
// extern (instantiations.cpp holds the float ones).
#define HEADWISE_DETAIL_INSTANTIATE double
#include <headwise/extern_templates.hpp>
