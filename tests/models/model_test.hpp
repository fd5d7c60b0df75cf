// SPDX-License-Identifier: MIT
// The model tests are one program (model_tests, tests/CMakeLists.txt), compiled as one
// translation unit so that the models they share are compiled once: each file puts its checks
// in `namespace model_<name> { int run(); }` and registers run() here under <name>;
// model_main.cpp runs the one its first argument names. run() returns the program's exit
// status: 0 passed, 1 failed, 77 skipped (ctest's SKIP_RETURN_CODE).
#ifndef HEADWISE_TESTS_MODELS_MODEL_TEST_HPP
#define HEADWISE_TESTS_MODELS_MODEL_TEST_HPP

#include <map>     // std::map
#include <string>  // std::string

namespace model_tests {

using Run = int (*)();

/// The registered tests by name.
inline std::map<std::string, Run>& registry() {
    static std::map<std::string, Run> tests;
    return tests;
}

/// `const model_tests::Registration registration{"name", run};` at namespace scope registers run.
struct Registration {
    Registration(const char* name, Run run) { registry().emplace(name, run); }
};

}  // namespace model_tests

#endif  // HEADWISE_TESTS_MODELS_MODEL_TEST_HPP
