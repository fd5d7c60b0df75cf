// SPDX-License-Identifier: MIT
// The pre-tokenizer split of byte-level BPE (GPT-2's regex, and SmolLM2's digits before it),
// written over code points with utf8proc's categories; used by text/bpe.hpp.
#pragma once

#include <utf8proc.h>  // utf8proc_category

#include <cstddef>  // std::size_t
#include <cstdint>  // std::int32_t, std::uint8_t
#include <vector>   // std::vector

#include "unicode.hpp"

namespace headwise::detail {

/// The classes GPT-2's split regex tells apart:
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// letters (\p{L}: Lu Ll Lt Lm Lo), numbers (\p{N}: Nd Nl No), white space (\s: Unicode's
/// White_Space, as Oniguruma reads \s) and the rest.
enum class SplitClass : std::uint8_t { letter, number, space, other };

inline SplitClass split_class(std::int32_t c) {
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return SplitClass::letter;
        if (c >= '0' && c <= '9') return SplitClass::number;
        if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return SplitClass::space;
        return SplitClass::other;
    }
    switch (utf8proc_category(c)) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
            return SplitClass::letter;
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return SplitClass::number;
        default:
            return is_whitespace(c) ? SplitClass::space : SplitClass::other;
    }
}

/// GPT-2's regex over code points [begin, end) of `cps` (classes in `cls`), as a leftmost
/// match of its first alternative that matches at each position: f(i, j) for each piece
/// [i, j). Every branch moves forward, and each code point is looked at a bounded number of
/// times: linear in end - begin.
template <class F>
void split_byte_level(const std::vector<std::int32_t>& cps, const std::vector<SplitClass>& cls,
                      std::size_t begin, std::size_t end, F&& f) {
    std::size_t i = begin;
    while (i < end) {
        const std::int32_t c = cps[i];
        // 's 't 'm 'd, then 're 've 'll: case-sensitive, as GPT-2's regex has them.
        if (c == '\'' && i + 1 < end) {
            const std::int32_t n = cps[i + 1];
            if (n == 's' || n == 't' || n == 'm' || n == 'd') {
                f(i, i + 2);
                i += 2;
                continue;
            }
            if (i + 2 < end) {
                const std::int32_t m = cps[i + 2];
                if ((n == 'r' && m == 'e') || (n == 'v' && m == 'e') || (n == 'l' && m == 'l')) {
                    f(i, i + 3);
                    i += 3;
                    continue;
                }
            }
        }
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space (U+0020 only), then a
        // run of one class.
        std::size_t k = i;
        if (c == ' ' && i + 1 < end && cls[i + 1] != SplitClass::space) k = i + 1;
        const SplitClass run = cls[k];
        if (run != SplitClass::space) {
            std::size_t j = k + 1;
            while (j < end && cls[j] == run) ++j;
            f(i, j);
            i = j;
            continue;
        }
        // `\s+(?!\S)`: the run of white space, less its last character when a non-space follows
        // (that one starts the next piece, as " word"); a single space before a non-space is
        // `\s+` on its own.
        std::size_t j = i + 1;
        while (j < end && cls[j] == SplitClass::space) ++j;
        if (j < end && j - 1 > i) --j;
        f(i, j);
        i = j;
    }
}

}  // namespace headwise::detail
