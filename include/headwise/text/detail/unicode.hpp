// SPDX-License-Identifier: MIT
// Unicode classes, UTF-8 encoding and decoding for the BERT tokenizer (text/wordpiece.hpp); needs
// utf8proc.
#pragma once

#include <utf8proc.h>

#include <cstddef>           // std::size_t
#include <cstdint>           // std::int32_t
#include <initializer_list>  // std::initializer_list
#include <stdexcept>         // std::invalid_argument
#include <string>            // std::string, std::u32string, std::to_string
#include <string_view>       // std::string_view

namespace headwise::detail {

inline bool is_category(std::int32_t c, std::initializer_list<utf8proc_category_t> cats) {
    const utf8proc_category_t k = utf8proc_category(c);
    for (utf8proc_category_t x : cats)
        if (k == x) return true;
    return false;
}

/// Unicode's White_Space property: Zs, Zl, Zp, and the controls tab to CR and NEL.
inline bool is_whitespace(std::int32_t c) {
    if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
    return is_category(c, {UTF8PROC_CATEGORY_ZS, UTF8PROC_CATEGORY_ZL, UTF8PROC_CATEGORY_ZP});
}

/// BERT's "control": the "other" categories Cc, Cf, Co, Cs, but tab, LF and CR, which it counts
/// as white space. (Unassigned code points, Cn, are kept, as `tokenizers` keeps them.)
inline bool is_control(std::int32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    return is_category(c, {UTF8PROC_CATEGORY_CC, UTF8PROC_CATEGORY_CF, UTF8PROC_CATEGORY_CO,
                           UTF8PROC_CATEGORY_CS});
}

/// The CJK Unified Ideographs blocks BERT isolates (Devlin et al.'s tokenization.py lists them;
/// `tokenizers` starts Extension E at U+2B920). Hangul, kana and CJK punctuation are not among
/// them: those scripts are written with spaces or split by the punctuation rule.
inline bool is_chinese_char(std::int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/// ASCII punctuation (the 32 printable non-alphanumeric ASCII characters: BERT counts $, +, <,
/// =, >, ^, `, |, ~ as punctuation though Unicode calls them symbols), or a P* category.
inline bool is_punctuation(std::int32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
        (c >= 123 && c <= 126))
        return true;
    return is_category(
        c, {UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PD, UTF8PROC_CATEGORY_PS, UTF8PROC_CATEGORY_PE,
            UTF8PROC_CATEGORY_PI, UTF8PROC_CATEGORY_PF, UTF8PROC_CATEGORY_PO});
}

inline void append_utf8(std::string& out, std::int32_t c) {
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(c, buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

inline std::string to_utf8(const std::u32string& s, std::size_t begin, std::size_t end) {
    std::string out;
    out.reserve(end - begin);
    for (std::size_t i = begin; i < end; ++i) append_utf8(out, static_cast<std::int32_t>(s[i]));
    return out;
}

/// Appends the code points of UTF-8 `text` to `out`; throws naming the first invalid byte.
inline void decode_utf8(const char* fn, std::string_view text, std::size_t offset,
                        std::u32string& out) {
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
    std::size_t i = 0;
    while (i < text.size()) {
        utf8proc_int32_t c = 0;
        const utf8proc_ssize_t n =
            utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &c);
        if (n <= 0)
            throw std::invalid_argument(std::string(fn) + ": text: invalid UTF-8 at byte " +
                                        std::to_string(offset + i));
        out.push_back(static_cast<char32_t>(c));
        i += static_cast<std::size_t>(n);
    }
}

}  // namespace headwise::detail
