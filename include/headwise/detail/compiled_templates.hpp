// SPDX-License-Identifier: MIT
// HEADWISE_COMPILED_TEMPLATES(LIST): the templates a header compiles once into headwise::compiled,
// named at the end of that header, beside their definitions.
#pragma once

// Why: compile time. A translation unit that runs MultiheadAttention, a model, or a training loop
// on a tape otherwise instantiates all of it, forward and backward, for each scalar it uses: most
// of the ten seconds or more such a program takes to compile. headwise::compiled (src/compiled.cpp,
// src/compiled_double.cpp) holds the float and double instantiations of the templates the headers
// name here, and a program that links it (HEADWISE_COMPILED is then defined) declares them
// `extern` header by header: it compiles what it includes and no more.
//
// How to read it: each header that defines such templates ends with
//
//   #define HEADWISE_DETAIL_LINEAR_TEMPLATES(C, F, T) C(class, Linear<T>)
//   HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_LINEAR_TEMPLATES);
//
// where the list calls C(class-key, type) for each class template over the scalar T (the key as
// the template declares it: clang warns of a mismatch) and F(return type, name, (parameter types))
// for each function template; names are relative to namespace headwise. One line per template, so
// that a new module is one new line beside its definition. A template is listed where all its
// members are defined: the Llama models' in llama_gguf.hpp, which defines their from_gguf (an
// explicit instantiation compiles only the members defined before it).
// tests/compiled_templates.cmake fails when a `template <class T> class|struct Name` of layers/,
// layers/attention/, optim/, autograd/ or models/ is named by no header's list and by no
// "not compiled: Name" line.
//
// What the macro expands to, in namespace headwise:
// - HEADWISE_DETAIL_INSTANTIATE defined (to float or double): the explicit instantiation
//   definitions for that scalar (the translation units of headwise::compiled, and of the tests'
//   shared instantiations, one per scalar, built in parallel);
// - else HEADWISE_COMPILED (a program linking headwise::compiled) or HEADWISE_DETAIL_EXTERN (the
//   tests, linking their shared instantiations): `extern template` for float and double;
// - else nothing: the program instantiates what it uses, as any header-only library.
//
// Why every member compiles for both scalars: an explicit instantiation definition compiles every
// non-template member, so a member that only works for float must refuse double at run time
// (as with_precision(Precision::bf16) does), not with a static_assert.
#define HEADWISE_DETAIL_EXTERN_CLASS(key, type) extern template key type;
#define HEADWISE_DETAIL_EXTERN_FUNCTION(result, name, parameters) \
    extern template result name parameters;
#define HEADWISE_DETAIL_DEFINE_CLASS(key, type) template key type;
#define HEADWISE_DETAIL_DEFINE_FUNCTION(result, name, parameters) template result name parameters;

#if defined(HEADWISE_DETAIL_INSTANTIATE)
#define HEADWISE_COMPILED_TEMPLATES(LIST)                               \
    namespace headwise {                                                \
    LIST(HEADWISE_DETAIL_DEFINE_CLASS, HEADWISE_DETAIL_DEFINE_FUNCTION, \
         HEADWISE_DETAIL_INSTANTIATE)                                   \
    }                                                                   \
    static_assert(true, "HEADWISE_COMPILED_TEMPLATES is followed by a semicolon")
#elif defined(HEADWISE_COMPILED) || defined(HEADWISE_DETAIL_EXTERN)
#define HEADWISE_COMPILED_TEMPLATES(LIST)                                       \
    namespace headwise {                                                        \
    LIST(HEADWISE_DETAIL_EXTERN_CLASS, HEADWISE_DETAIL_EXTERN_FUNCTION, float)  \
    LIST(HEADWISE_DETAIL_EXTERN_CLASS, HEADWISE_DETAIL_EXTERN_FUNCTION, double) \
    }                                                                           \
    static_assert(true, "HEADWISE_COMPILED_TEMPLATES is followed by a semicolon")
#else
#define HEADWISE_COMPILED_TEMPLATES(LIST) \
    static_assert(true, "HEADWISE_COMPILED_TEMPLATES is followed by a semicolon")
#endif
