// SPDX-License-Identifier: MIT
// libFuzzer target for the WordPiece tokenizer: any bytes either tokenize or throw the invalid
// UTF-8 error, and what tokenizes agrees with a plain reference of the normalisation (NFD by
// utf8proc_map over each whole piece, special tokens by trying each at every byte), with
// tokenize() and with encode()'s truncation. The first byte picks the options.
#include <headwise/text/wordpiece.hpp>

#include <algorithm>    // std::equal, std::find_if, std::min, std::stable_sort
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t, std::int64_t
#include <cstdlib>      // std::abort, std::free
#include <memory>       // std::unique_ptr
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::u32string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

namespace {

using headwise::text::BertTokenizer;
using headwise::text::BertTokenizerOptions;
using Words = std::vector<std::string>;

const std::vector<std::string> kVocab = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",   "<s",  "<s>", "<s>>",  "[X][Y]", "\xff",
    "a",     "b",     "e",     "##a",   "##b",      "##e", "un",  "##aff", "##able", "cafe",
    "caf",   "##é",   "中",    "文",    "ひらかな", "i",   "##i", "##̇",    ",",      "!"};

BertTokenizerOptions options(int which) {
    BertTokenizerOptions o;
    o.additional_special_tokens = {"<s", "<s>", "<s>>", "[X][Y]", "\xff"};
    if (which & 1) o.lowercase = false;
    if (which & 2) o.strip_accents = !o.lowercase;  // the other way round from BERT's default
    if (which & 4) o.clean_text = false;
    if (which & 8) o.tokenize_chinese_chars = false;
    if (which & 16) o.max_length = 2 + (which >> 5);  // 2 to 9: truncation, to nothing at all
    if (which & 32) o.max_input_chars_per_word = 3;
    return o;
}

void check(bool ok) {
    if (!ok) std::abort();
}

// The former normalisation, written plainly: steps 1-5 over a whole piece at once.
void reference_piece(const BertTokenizerOptions& o, std::string_view piece, std::size_t offset,
                     Words& words) {
    constexpr const char* fn = "headwise::text::BertTokenizer::tokenize";
    std::u32string raw, s;
    headwise::detail::decode_utf8(fn, piece, offset, raw);
    for (char32_t ch : raw) {
        const auto c = static_cast<std::int32_t>(ch);
        if (o.clean_text) {
            if (c == 0 || c == 0xFFFD || headwise::detail::is_control(c)) continue;
            if (headwise::detail::is_whitespace(c)) {
                s.push_back(U' ');
                continue;
            }
        }
        if (o.tokenize_chinese_chars && headwise::detail::is_chinese_char(c)) {
            s += U' ';
            s += ch;
            s += U' ';
            continue;
        }
        s.push_back(ch);
    }
    if (o.strip_accents.value_or(o.lowercase)) {
        const std::string utf8 = headwise::detail::to_utf8(s, 0, s.size());
        utf8proc_uint8_t* nfd = nullptr;
        const utf8proc_ssize_t n =
            utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                         static_cast<utf8proc_ssize_t>(utf8.size()), &nfd,
                         static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
        check(n >= 0);
        const std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> owner(nfd, std::free);
        std::u32string decomposed;
        headwise::detail::decode_utf8(
            fn, std::string_view(reinterpret_cast<const char*>(nfd), static_cast<std::size_t>(n)),
            0, decomposed);
        s.clear();
        for (char32_t ch : decomposed)
            if (utf8proc_category(static_cast<std::int32_t>(ch)) != UTF8PROC_CATEGORY_MN)
                s.push_back(ch);
    }
    std::u32string lower;
    for (char32_t ch : s) {
        if (!o.lowercase) {
            lower += ch;
        } else if (ch == 0x130) {
            lower += U'i';
            lower += char32_t{0x307};
        } else {
            lower += static_cast<char32_t>(utf8proc_tolower(static_cast<std::int32_t>(ch)));
        }
    }
    std::size_t begin = 0;
    for (std::size_t i = 0; i <= lower.size(); ++i) {
        const bool end = i == lower.size();
        const auto c = end ? 0 : static_cast<std::int32_t>(lower[i]);
        const bool space = !end && headwise::detail::is_whitespace(c);
        const bool punct = !end && !space && headwise::detail::is_punctuation(c);
        if (end || space || punct) {
            if (i > begin) words.push_back(headwise::detail::to_utf8(lower, begin, i));
            if (punct) words.push_back(headwise::detail::to_utf8(lower, i, i + 1));
            begin = i + 1;
        }
    }
}

Words reference_words(const BertTokenizerOptions& o, std::string_view text) {
    std::vector<std::string> specials = {o.unk_token, o.sep_token, o.pad_token, o.cls_token,
                                         o.mask_token};
    specials.insert(specials.end(), o.additional_special_tokens.begin(),
                    o.additional_special_tokens.end());
    std::stable_sort(specials.begin(), specials.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    Words words;
    std::size_t start = 0, i = 0;
    while (i < text.size()) {
        const auto m = std::find_if(specials.begin(), specials.end(), [&](const std::string& s) {
            return text.compare(i, s.size(), s) == 0;
        });
        if (m == specials.end()) {
            ++i;
            continue;
        }
        if (i > start) reference_piece(o, text.substr(start, i - start), start, words);
        words.push_back(*m);
        i += m->size();
        start = i;
    }
    if (text.size() > start) reference_piece(o, text.substr(start), start, words);
    return words;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    static std::vector<BertTokenizer> tokenizers = [] {
        std::vector<BertTokenizer> t;
        for (int which = 0; which < 256; ++which) t.emplace_back(kVocab, options(which));
        return t;
    }();
    const BertTokenizer& tok = tokenizers[data[0]];
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

    std::string error;
    Words words;
    try {
        words = tok.basic_tokenize(text);
    } catch (const std::invalid_argument& e) {
        error = e.what();
        check(error.rfind("headwise::text::BertTokenizer::tokenize: text: invalid UTF-8 at byte ",
                          0) == 0);
    }
    // The reference fails as the tokenizer does, at the same byte, or gives the same words.
    try {
        check(reference_words(tok.options(), text) == words && error.empty());
    } catch (const std::invalid_argument& e) {
        check(error == e.what());
    }
    // tokenize() and encode() fail alike, or give ids of the vocabulary, encode() truncating.
    std::vector<std::int64_t> ids, encoded;
    try {
        ids = tok.tokenize(text);
        check(error.empty());
    } catch (const std::invalid_argument& e) {
        check(error == e.what());
    }
    try {
        encoded = tok.encode(text);
        check(error.empty());
    } catch (const std::invalid_argument& e) {
        check(error == e.what());
    }
    if (!error.empty()) return 0;
    for (std::int64_t id : ids) check(id >= 0 && id < tok.vocab_size());
    const std::size_t keep =
        std::min(ids.size(), static_cast<std::size_t>(tok.options().max_length - 2));
    check(encoded.size() == keep + 2 && encoded.front() == tok.cls_id() &&
          encoded.back() == tok.sep_id() &&
          std::equal(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep),
                     encoded.begin() + 1));
    // Each word is one id at least: a special token's, its pieces' or [UNK].
    check(ids.size() >= words.size());
    return 0;
}
