// SPDX-License-Identifier: MIT
// The headwise::compiled library, double half (compiled.cpp holds the float half and says why).
#if !defined(HEADWISE_COMPILED)
#error "src/compiled_double.cpp is built by the headwise::compiled target (HEADWISE_COMPILED)"
#endif

#define HEADWISE_DETAIL_INSTANTIATE double
#include <headwise/extern_templates.hpp>
