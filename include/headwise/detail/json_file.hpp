// SPDX-License-Identifier: MIT
// Reading a whole text file, and a JSON object from a file, with errors naming the file (models/,
// text/).
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>    // std::ifstream
#include <iterator>   // std::istreambuf_iterator
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string

namespace headwise::detail {

/// The bytes of file `path`; throws std::runtime_error naming `fn` and the file.
inline std::string read_text_file(const char* fn, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(std::string(fn) + ": " + path + ": cannot open the file");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw std::runtime_error(std::string(fn) + ": " + path + ": read error");
    return s;
}

/// The JSON object in file `path`; throws std::runtime_error naming `fn` and the file when it
/// cannot be read, is not JSON, or is not an object.
inline nlohmann::json read_json_file(const char* fn, const std::string& path) {
    const std::string text = read_text_file(fn, path);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        throw std::runtime_error(std::string(fn) + ": " + path + ": not valid JSON");
    if (!j.is_object())
        throw std::runtime_error(std::string(fn) + ": " + path + ": expected a JSON object");
    return j;
}

}  // namespace headwise::detail
