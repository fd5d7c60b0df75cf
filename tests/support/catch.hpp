// SPDX-License-Identifier: MIT
// Catch2 v2/v3 shim: tests include this instead of a Catch2 header and compile against either.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
// Catch2 v3: one header per feature.
#include <catch2/catch_approx.hpp>                            // Catch::Approx
#include <catch2/catch_template_test_macros.hpp>              // TEMPLATE_TEST_CASE
#include <catch2/catch_test_macros.hpp>                       // TEST_CASE, REQUIRE, CAPTURE, ...
#include <catch2/generators/catch_generators.hpp>             // GENERATE, table, values
#include <catch2/generators/catch_generators_adapters.hpp>    // take, filter, map
#include <catch2/generators/catch_generators_range.hpp>       // range
#include <catch2/matchers/catch_matchers_exception.hpp>       // Message
#include <catch2/matchers/catch_matchers_floating_point.hpp>  // WithinRel, WithinAbs, WithinULP
#include <catch2/matchers/catch_matchers_string.hpp>          // ContainsSubstring, StartsWith
#define HEADWISE_CATCH2_VERSION_MAJOR 3
#elif __has_include(<catch2/catch.hpp>)
// Catch2 v2: the single header.
#include <catch2/catch.hpp>
#define HEADWISE_CATCH2_VERSION_MAJOR 2
#else
#error "headwise tests need Catch2 v2 (<catch2/catch.hpp>) or v3 (<catch2/catch_test_macros.hpp>)"
#endif

#include <string>  // std::string

// The matchers tests use, by the same names under both versions.
using Catch::Matchers::Message;
using Catch::Matchers::StartsWith;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

#if HEADWISE_CATCH2_VERSION_MAJOR == 3
using Catch::Matchers::ContainsSubstring;
#else
// v2 declares Approx in Catch::Detail (and at global scope); v3 as Catch::Approx. Use the latter.
namespace Catch {
using Detail::Approx;
}  // namespace Catch

// v3 renamed Contains (for strings) to ContainsSubstring; give v2 the new name.
inline Catch::Matchers::StdString::ContainsMatcher ContainsSubstring(
    const std::string& needle,
    Catch::CaseSensitive::Choice case_sensitivity = Catch::CaseSensitive::Yes) {
    return Catch::Matchers::Contains(needle, case_sensitivity);
}
#endif
