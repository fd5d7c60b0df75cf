// SPDX-License-Identifier: MIT
// The headwise::compiled library, float half: the one explicit instantiation, for float, of each
// template a header names in its HEADWISE_COMPILED_TEMPLATES list (detail/compiled_templates.hpp
// says why); compiled_double.cpp holds the double half.
#if !defined(HEADWISE_COMPILED)
#error "src/compiled.cpp is built by the headwise::compiled target, which defines HEADWISE_COMPILED"
#endif

#define HEADWISE_DETAIL_INSTANTIATE float
#include <headwise/extern_templates.hpp>
