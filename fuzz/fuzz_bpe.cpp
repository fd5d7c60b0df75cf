// SPDX-License-Identifier: MIT
// libFuzzer target for the byte-level BPE tokenizer: any bytes either encode or throw the
// invalid UTF-8 error (exactly when utf8proc finds the bytes invalid); what encodes decodes back
// to the same bytes, and its ids are those of a plain reference: GPT-2's split, then each word
// merged by the textbook loop (find the adjacent pair of lowest rank, merge it, repeat). The
// first byte picks the pre-tokenizer and add_prefix_space.
#include <headwise/text/bpe.hpp>

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t, std::int64_t, std::int32_t
#include <cstdlib>      // std::abort
#include <map>          // std::map
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair, std::move
#include <vector>       // std::vector

namespace {

using headwise::text::BpeConfig;
using headwise::text::BpePreTokenizer;
using headwise::text::BpeTokenizer;

void check(bool ok) {
    if (!ok) std::abort();
}

std::string byte_char(int b) {
    const auto alphabet = headwise::text::bpe_detail::byte_alphabet();
    std::string s;
    headwise::detail::append_utf8(s, alphabet[static_cast<std::size_t>(b)]);
    return s;
}

BpeConfig config() {
    BpeConfig c;
    for (int b = 0; b < 256; ++b) c.tokens.push_back(byte_char(b));
    // Merges that chain (aa, aaaa, aaa), overlap (a a / aa a), cross a character's bytes (中 is
    // E4 B8 AD) and join spaces and digits, to give the heap's tie-breaking work.
    const std::string sp = byte_char(' '), nl = byte_char('\n');
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"a", "a"},
        {sp, "t"},
        {"h", "e"},
        {sp + "t", "he"},
        {"aa", "aa"},
        {"aa", "a"},
        {sp, sp},
        {sp + sp, sp + sp},
        {"1", "2"},
        {"12", "3"},
        {nl, nl},
        {"'", "s"},
        {byte_char(0xE4), byte_char(0xB8)},
        {byte_char(0xE4) + byte_char(0xB8), byte_char(0xAD)},
        {sp, "a"},
        {"b", "a"},
        {"ba", "aa"},
        {"a", "b"},
        {"ab", "a"},
        {sp + "a", "b"}};
    for (const auto& [x, y] : merges) {
        c.merges.emplace_back(x, y);
        bool known = false;
        for (const std::string& t : c.tokens) known = known || t == x + y;
        if (!known) c.tokens.push_back(x + y);
    }
    for (const char* t : {"<|x|>", "<|x|>>", "<s>"}) {
        c.tokens.push_back(t);
        c.added.push_back({t, static_cast<std::int64_t>(c.tokens.size() - 1), t[1] == '|'});
    }
    return c;
}

// The textbook merge loop over one word's bytes.
void reference_word(const BpeConfig& c, const std::map<std::string, std::int64_t>& ids,
                    std::string_view word, std::vector<std::int64_t>& out) {
    std::vector<std::string> sym;
    for (const char ch : word) sym.push_back(byte_char(static_cast<unsigned char>(ch)));
    while (sym.size() > 1) {
        std::size_t best = sym.size(), best_rank = c.merges.size();
        for (std::size_t i = 0; i + 1 < sym.size(); ++i)
            for (std::size_t r = 0; r < best_rank; ++r)
                if (c.merges[r].first == sym[i] && c.merges[r].second == sym[i + 1]) {
                    best = i;
                    best_rank = r;
                    break;
                }
        if (best == sym.size()) break;
        sym[best] += sym[best + 1];
        sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    for (const std::string& s : sym) out.push_back(ids.at(s));
}

bool valid_utf8(std::string_view s) {
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
    for (std::size_t i = 0; i < s.size();) {
        utf8proc_int32_t c = 0;
        const utf8proc_ssize_t n =
            utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &c);
        if (n <= 0) return false;
        i += static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const int which = data[0];
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    // The four tokenizers and the reference's index, made once.
    static const std::vector<BpeTokenizer> tokenizers = [] {
        std::vector<BpeTokenizer> all;
        for (int k = 0; k < 4; ++k) {
            BpeConfig v = config();
            v.pre_tokenizer =
                (k & 1) ? BpePreTokenizer::digits_byte_level : BpePreTokenizer::byte_level;
            v.add_prefix_space = (k & 2) != 0;
            all.emplace_back(std::move(v));
        }
        return all;
    }();
    static const std::map<std::string, std::int64_t> index = [] {
        const BpeConfig v = config();
        std::map<std::string, std::int64_t> m;
        for (std::size_t i = 0; i < v.tokens.size(); ++i)
            m[v.tokens[i]] = static_cast<std::int64_t>(i);
        return m;
    }();
    const BpeTokenizer& tok = tokenizers[static_cast<std::size_t>(which & 3)];
    const BpeConfig& c = tok.config();
    std::vector<std::int64_t> ids;
    try {
        ids = tok.encode(text);
    } catch (const std::invalid_argument&) {
        check(!valid_utf8(text));
        return 0;
    }
    check(valid_utf8(text));
    if (!c.add_prefix_space) check(tok.decode(ids) == text);
    if (which & 3) return 0;
    // GPT-2's split and the textbook loop, added tokens matched first (leftmost-longest).
    std::vector<std::int64_t> want;
    auto segment = [&](std::string_view s) {
        std::vector<std::int32_t> cps;
        std::vector<std::size_t> at;
        std::vector<headwise::detail::SplitClass> cls;
        const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
        for (std::size_t i = 0; i < s.size();) {
            utf8proc_int32_t ch = 0;
            const auto n =
                utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &ch);
            cps.push_back(ch);
            at.push_back(i);
            cls.push_back(headwise::detail::split_class(ch));
            i += static_cast<std::size_t>(n);
        }
        at.push_back(s.size());
        headwise::detail::split_byte_level(
            cps, cls, 0, cps.size(), [&](std::size_t a, std::size_t b) {
                reference_word(c, index, s.substr(at[a], at[b] - at[a]), want);
            });
    };
    std::size_t begin = 0, i = 0;
    while (i < text.size()) {
        std::size_t len = 0;
        for (const auto& a : c.added)
            if (text.substr(i, a.content.size()) == a.content && a.content.size() > len)
                len = a.content.size();
        if (len == 0) {
            ++i;
            continue;
        }
        segment(text.substr(begin, i - begin));
        want.push_back(index.at(std::string(text.substr(i, len))));
        i += len;
        begin = i;
    }
    segment(text.substr(begin));
    check(ids == want);
    return 0;
}
