// SPDX-License-Identifier: MIT
// Explicit instantiation declarations, for float and double, of the templates that
// headwise::compiled compiles once (the list is detail/instantiation_list.hpp).
#pragma once

#include "detail/instantiation_list.hpp"

// Why: compile time. A translation unit that runs MultiheadAttention, a model, or a training
// loop on a tape with an optimiser otherwise instantiates all of it, forward and backward, for
// each scalar it uses: most of the ten seconds or more such a program takes to compile. Declared
// extern here, the members are compiled once, into the headwise::compiled library
// (src/compiled.cpp), and a user's program only parses the headers. HEADWISE_COMPILED is defined
// by that CMake target; without it this header declares nothing, so a program that does not link
// the library still instantiates what it uses, as before.
#if defined(HEADWISE_COMPILED)
namespace headwise {
HEADWISE_DECLARE_INSTANTIATIONS()
}  // namespace headwise
#endif
