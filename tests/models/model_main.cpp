// SPDX-License-Identifier: MIT
// model_tests <name>: runs the model test registered as <name> (model_test.hpp) and exits with
// its status; without a known name it lists the names and exits 2.
#include "model_test.hpp"

#include <cstdio>  // std::fprintf
#include <string>  // std::string

int main(int argc, char** argv) {
    const auto& tests = model_tests::registry();
    const auto it = argc == 2 ? tests.find(argv[1]) : tests.end();
    if (it == tests.end()) {
        std::fprintf(stderr, "usage: model_tests NAME, with NAME one of:");
        for (const auto& [name, run] : tests) std::fprintf(stderr, " %s", name.c_str());
        std::fprintf(stderr, "\n");
        return 2;
    }
    return it->second();
}
