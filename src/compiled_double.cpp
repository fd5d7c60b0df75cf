// SPDX-License-Identifier: MIT
// The headwise::compiled library, double half (compiled.cpp holds the float half and says why).
#include <headwise/extern_templates.hpp>

#if !defined(HEADWISE_COMPILED)
#error "src/compiled_double.cpp is built by the headwise::compiled target (HEADWISE_COMPILED)"
#endif

namespace headwise {
HEADWISE_DEFINE_INSTANTIATIONS(double)
}  // namespace headwise
