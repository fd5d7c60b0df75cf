// SPDX-License-Identifier: MIT
// Reading a whole text file, and a JSON value from a file, bounded in size and nesting, with errors
// naming the file; and a JSON value described in bounded space for messages (models/, text/).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>     // std::min
#include <cstddef>       // std::size_t
#include <cstdint>       // std::uint64_t, std::uintmax_t
#include <filesystem>    // std::filesystem::file_size
#include <fstream>       // std::ifstream
#include <ios>           // std::ios, std::streamsize
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code

#include "file_kind.hpp"

namespace headwise::detail {

/// The largest text or JSON file read whole (config.json, tokenizer files, vocab.txt): 64 MiB.
/// Released models' largest such files (a tokenizer.json) hold a few tens of MB at most; a larger
/// file is refused before it is read, and one that grows past it while being read is refused then.
inline constexpr std::uint64_t kMaxTextFileBytes = std::uint64_t{64} << 20;

/// The deepest nesting of arrays and objects a JSON file read here may have. Configurations and
/// tokenizer files nest a few levels; anything deeper is refused before it is parsed, so that
/// nothing downstream (copies, comparisons, dump) recurses deeply.
inline constexpr int kMaxJsonDepth = 128;

/// At most this many bytes of a string from a file are quoted in a message.
inline constexpr std::size_t kMaxQuotedBytes = 64;

/// The bytes of file `path`, a regular file of at most `max_bytes` bytes. Throws
/// std::runtime_error "<fn>: <path>: <what>" when it is something else (a directory, a FIFO, a
/// device, ... — refused before it is opened), larger, or cannot be opened or read.
std::string read_text_file(const char* fn, const std::string& path,
                           std::uint64_t max_bytes = kMaxTextFileBytes);

/// The JSON value in file `path` (read as read_text_file does); throws std::runtime_error naming
/// `fn` and the file when it cannot be read, nests deeper than kMaxJsonDepth, or is not JSON.
nlohmann::json read_json_value(const char* fn, const std::string& path);

/// As read_json_value, and the value must be an object.
nlohmann::json read_json_file(const char* fn, const std::string& path);

/// `v` for an error message, in bounded space and without recursion: null, true, false and
/// numbers as JSON writes them; a string quoted as JSON writes it, cut after kMaxQuotedBytes bytes
/// (at a character boundary) with `... (N bytes)` after it; "an array of N elements" and "an
/// object of N keys" (or "an empty array", "an empty object") without their contents.
std::string describe_json(const nlohmann::json& v);

/// `s` quoted for an error message as describe_json quotes a JSON string.
std::string quote_bounded(const std::string& s);

// ---- definitions -----------------------------------------------------------------------------

namespace json_file_impl {

inline std::string too_large(std::uint64_t max_bytes) {
    const bool mib = max_bytes % (std::uint64_t{1} << 20) == 0;
    return "more than the " + std::to_string(max_bytes) + " bytes" +
           (mib ? " (" + std::to_string(max_bytes >> 20) + " MiB)" : std::string()) +
           " a text or JSON file may have";
}

/// Throws when the arrays and objects of `text` nest deeper than kMaxJsonDepth. A scan of the
/// bytes (brackets inside strings skipped): for valid JSON it counts exactly what the parser
/// would, and invalid JSON the parser refuses anyway.
inline void check_depth(const char* fn, const std::string& path, const std::string& text) {
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;  // the escaped character, a quote or a backslash included
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                throw std::runtime_error(
                    std::string(fn) + ": " + path + ": JSON nested deeper than " +
                    std::to_string(kMaxJsonDepth) + " levels (at byte " + std::to_string(i) + ")");
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
}

}  // namespace json_file_impl

inline std::string read_text_file(const char* fn, const std::string& path,
                                  std::uint64_t max_bytes) {
    const auto fail = [&](const std::string& what) {
        throw std::runtime_error(std::string(fn) + ": " + path + ": " + what);
    };
    // Checked before the file is opened: a directory fails inside the stream with a message that
    // names nothing, a device such as /dev/zero never ends, and opening a FIFO waits for a writer.
    const std::string special = special_file_kind(path);
    if (!special.empty()) fail("is " + special + ", not a regular file");
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > max_bytes)
        fail("holds " + std::to_string(size) + " bytes, " + json_file_impl::too_large(max_bytes));
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open the file");
    // Read in pieces up to one byte past the limit: the file may have grown (or been replaced)
    // since it was measured.
    std::string s;
    if (!ec) s.reserve(static_cast<std::size_t>(size));
    while (in) {
        const std::size_t have = s.size();
        const auto piece =
            static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes + 1 - have, 1 << 16));
        s.resize(have + piece);
        in.read(&s[have], static_cast<std::streamsize>(piece));
        s.resize(have + static_cast<std::size_t>(in.gcount()));
        if (s.size() > max_bytes) fail("holds " + json_file_impl::too_large(max_bytes));
    }
    if (in.bad()) fail("read error");
    return s;
}

inline nlohmann::json read_json_value(const char* fn, const std::string& path) {
    const std::string text = read_text_file(fn, path);
    json_file_impl::check_depth(fn, path, text);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        throw std::runtime_error(std::string(fn) + ": " + path + ": not valid JSON");
    return j;
}

inline nlohmann::json read_json_file(const char* fn, const std::string& path) {
    nlohmann::json j = read_json_value(fn, path);
    if (!j.is_object())
        throw std::runtime_error(std::string(fn) + ": " + path + ": expected a JSON object");
    return j;
}

inline std::string quote_bounded(const std::string& s) {
    const auto quoted = [](const std::string& bytes) {
        // replace: an invalid UTF-8 sequence becomes U+FFFD instead of an exception.
        return nlohmann::json(bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    if (s.size() <= kMaxQuotedBytes) return quoted(s);
    std::size_t cut = kMaxQuotedBytes;
    // Back to the start of a UTF-8 character (at most 3 continuation bytes).
    for (int k = 0; k < 3 && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0u) == 0x80u; ++k)
        --cut;
    return quoted(s.substr(0, cut)) + "... (" + std::to_string(s.size()) + " bytes)";
}

inline std::string describe_json(const nlohmann::json& v) {
    using Type = nlohmann::json::value_t;
    const auto count = [](std::size_t n, const char* what) {
        return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
    };
    switch (v.type()) {
        case Type::null:
            return "null";
        case Type::boolean:
            return v.get<bool>() ? "true" : "false";
        case Type::number_integer:
        case Type::number_unsigned:
        case Type::number_float:
            return v.dump();  // a scalar: at most a few dozen characters
        case Type::string:
            return quote_bounded(v.get_ref<const std::string&>());
        case Type::array:
            return v.empty() ? "an empty array" : "an array of " + count(v.size(), "element");
        case Type::object:
            return v.empty() ? "an empty object" : "an object of " + count(v.size(), "key");
        case Type::binary:
            return "binary data of " + count(v.get_binary().size(), "byte");
        case Type::discarded:
            break;
    }
    return "a discarded value";
}

}  // namespace headwise::detail
