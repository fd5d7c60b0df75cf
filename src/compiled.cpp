// SPDX-License-Identifier: MIT
// The headwise::compiled library, float half: the one explicit instantiation of each template
// that headwise/extern_templates.hpp declares extern (the list is detail/instantiation_list.hpp);
// compiled_double.cpp holds the double half.
#include <headwise/extern_templates.hpp>

#if !defined(HEADWISE_COMPILED)
#error "src/compiled.cpp is built by the headwise::compiled target, which defines HEADWISE_COMPILED"
#endif

namespace headwise {
HEADWISE_DEFINE_INSTANTIATIONS(float)
}  // namespace headwise
