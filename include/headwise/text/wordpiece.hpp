// SPDX-License-Identifier: MIT
// BertTokenizer: BERT's text normalisation, pre-tokenization and WordPiece, as Hugging Face's.
#pragma once

#if !__has_include(<utf8proc.h>) || !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/text/wordpiece.hpp needs utf8proc (Debian: libutf8proc-dev) and nlohmann/json \
(Debian: nlohmann-json3-dev); headwise::headwise links both when CMake finds them"
#endif

#include <utf8proc.h>  // utf8proc_decompose_char, utf8proc_category, utf8proc_get_property
#include <nlohmann/json.hpp>

#include <algorithm>         // std::max, std::stable_sort, std::upper_bound
#include <cstddef>           // std::size_t
#include <cstdint>           // std::int64_t, std::int32_t
#include <filesystem>        // std::filesystem::exists, symlink_status
#include <initializer_list>  // std::initializer_list
#include <optional>          // std::optional
#include <stdexcept>         // std::invalid_argument, std::runtime_error
#include <string>            // std::string, std::u32string, std::to_string
#include <string_view>       // std::string_view
#include <system_error>      // std::error_code
#include <unordered_map>     // std::unordered_map
#include <unordered_set>     // std::unordered_set
#include <utility>           // std::move, std::pair
#include <vector>            // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../io/detail/json_file.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/special_tokens.hpp"
#include "detail/unicode.hpp"

namespace headwise::text {

/// What a BERT tokenizer does besides its vocabulary: the keys of Hugging Face's
/// tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars, the special
/// tokens) and WordPiece's settings.
struct BertTokenizerOptions {
    bool lowercase = true;               // do_lower_case
    std::optional<bool> strip_accents;   // unset: strip when lowercasing, as BERT does
    bool tokenize_chinese_chars = true;  // a space on each side of every CJK ideograph
    bool clean_text = true;  // drop NUL, U+FFFD and control/format characters; whitespace -> ' '
    Index max_length = 512;  // ids per text after truncation, [CLS] and [SEP] included (>= 2)
    Index max_input_chars_per_word = 100;  // a longer word becomes [UNK] whole
    std::string continuing_subword_prefix = "##";
    std::string unk_token = "[UNK]";
    std::string cls_token = "[CLS]";
    std::string sep_token = "[SEP]";
    std::string pad_token = "[PAD]";
    std::string mask_token = "[MASK]";
    std::vector<std::string> additional_special_tokens;
};

/// A batch of encoded texts, padded on the right to the longest.
struct BertBatch {
    Tensor<std::int64_t> input_ids;  // [B, L]: [CLS] ... [SEP] then [PAD]
    Tensor<bool> padding_mask;       // [B, L]: true = padding (key_padding_mask's polarity)
    std::vector<Index> lengths;      // ids of each text before padding
};

/// BERT's tokenizer as Hugging Face's `tokenizers` runs it (BertNormalizer, BertPreTokenizer,
/// WordPiece, then [CLS] text [SEP]), the tokenizer sentence-transformers uses:
///  0. the special tokens ([CLS], [SEP], [PAD], [UNK], [MASK], additional ones) written in the
///     text are matched first, exactly and leftmost-longest (through a trie: their number does
///     not slow the scan), and pass through as themselves;
///  1. clean: NUL, U+FFFD and characters of category Cc, Cf, Co, Cs (but tab, LF, CR) are
///     dropped, white space (Unicode White_Space) becomes ' ';
///  2. a space on each side of every CJK ideograph;
///  3. accents stripped: canonical decomposition (NFD) without the nonspacing marks (Mn);
///  4. lower case (Unicode's full lower-case mapping);
///  5. split on white space, and every punctuation character (ASCII punctuation, which includes
///     $ + < = > ^ ` | ~, and Unicode's P* categories) on its own;
///  6. WordPiece (Wu et al. 2016): each word, greedily, as the longest vocabulary entry from its
///     start, then the longest "##"-prefixed entry from where that ended, and so on; a word
///     with a part no entry matches, or longer than max_input_chars_per_word characters,
///     becomes [UNK].
/// The work is linear in the text (a run of combining marks included: canonical ordering sorts
/// it, O(n log n)); encode() normalises no further than the words it keeps, but checks all of the
/// text to be UTF-8.
/// Unicode properties come from utf8proc, so they are those of its Unicode version; `tokenizers`
/// uses older tables for steps 1 and 5, and the characters assigned to a punctuation or format
/// category since then are split or dropped here but not there (see tests/text/test_wordpiece.cpp,
/// which measures this over every code point).
class BertTokenizer {
public:
    /// `vocab[i]` is the token of id i. Throws std::invalid_argument when a special token of
    /// `options` is not in the vocabulary or max_length < 2.
    explicit BertTokenizer(std::vector<std::string> vocab, BertTokenizerOptions options = {});

    /// From a Hugging Face model directory: vocab.txt, and when present tokenizer_config.json
    /// (do_lower_case, strip_accents, tokenize_chinese_chars, model_max_length, special tokens)
    /// and special_tokens_map.json. `max_length` overrides model_max_length (sentence-transformers
    /// truncates to its max_seq_length). Throws std::runtime_error naming the file that is
    /// missing or malformed, or vocab.txt and the file that named a special token vocab.txt
    /// lacks.
    static BertTokenizer from_directory(const std::string& dir,
                                        std::optional<Index> max_length = std::nullopt);

    /// Steps 0-5: the words and punctuation of `text` (UTF-8), normalised, special tokens as
    /// they are. Throws std::invalid_argument naming the byte offset of invalid UTF-8.
    std::vector<std::string> basic_tokenize(std::string_view text) const;
    /// Step 6 for one normalised word: its WordPiece ids.
    std::vector<std::int64_t> wordpiece(std::string_view word) const;
    /// Every id of `text` without [CLS], [SEP] or truncation.
    std::vector<std::int64_t> tokenize(std::string_view text) const;
    /// [CLS] ids [SEP], the ids truncated to max_length - 2.
    std::vector<std::int64_t> encode(std::string_view text) const;
    /// encode() of each text, padded with [PAD] to the longest. An empty batch gives [0, 0].
    BertBatch encode_batch(const std::vector<std::string>& texts) const;

    Index vocab_size() const noexcept { return static_cast<Index>(vocab_.size()); }
    std::optional<std::int64_t> token_to_id(std::string_view token) const;
    /// Throws std::out_of_range for an id outside [0, vocab_size()).
    const std::string& id_to_token(std::int64_t id) const;
    std::int64_t cls_id() const noexcept { return cls_id_; }
    std::int64_t sep_id() const noexcept { return sep_id_; }
    std::int64_t pad_id() const noexcept { return pad_id_; }
    std::int64_t unk_id() const noexcept { return unk_id_; }
    const BertTokenizerOptions& options() const noexcept { return options_; }

private:
    template <class F>
    void for_each_piece(std::string_view text, F&& f) const;
    // Steps 1-2 on the characters of a piece without special tokens.
    void clean_into(const std::u32string& raw, std::u32string& out) const;
    // Steps 3-4 on characters [begin, end) of a cleaned piece, a run that ends at white space
    // or at the end of the piece.
    void normalise_into(const char32_t* begin, const char32_t* end, std::u32string& out) const;
    void split_words(const std::u32string& text, std::vector<std::string>& words) const;
    // Steps 0-5: f(word, special id or none) for each word in order while it returns true; the
    // rest of the text is then only checked to be UTF-8.
    template <class F>
    void for_each_word(std::string_view text, F&& f) const;
    // Steps 0-6 until at least `limit` ids (every id when the text has fewer).
    std::vector<std::int64_t> tokenize_up_to(std::string_view text, std::size_t limit) const;

    BertTokenizerOptions options_;
    std::vector<std::string> vocab_;
    std::unordered_map<std::string, std::int64_t> ids_;
    std::size_t max_token_bytes_ = 0;    // the longest vocabulary entry: no longer piece can match
    detail::SpecialTokenTrie specials_;  // the special tokens, matched in the raw text
    std::int64_t cls_id_ = 0, sep_id_ = 0, pad_id_ = 0, unk_id_ = 0;
};

/// Reads a vocabulary file: one token per line, the id being the line number (from 0); trailing
/// white space and a CR are not part of a token. Throws std::runtime_error naming the file.
std::vector<std::string> read_vocab(const std::string& path);

// ---- definitions ----------------------------------------------------------------------------

namespace wordpiece_detail {

/// `s` between single quotes, as the messages here quote a token, cut as detail::quote_bounded
/// cuts a string (a token from a file may be megabytes long).
inline std::string quote(std::string_view s) {
    if (s.size() <= detail::kMaxQuotedBytes) return "'" + std::string(s) + "'";
    std::size_t n = detail::kMaxQuotedBytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return "'" + std::string(s.substr(0, n)) + "'... (" + std::to_string(s.size()) + " bytes)";
}

}  // namespace wordpiece_detail

inline std::vector<std::string> read_vocab(const std::string& path) {
    constexpr const char* fn = "headwise::text::read_vocab";
    const std::string text = detail::read_text_file(fn, path);
    std::vector<std::string> vocab;
    std::size_t begin = 0;
    while (begin < text.size()) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        std::size_t last = end;
        while (last > begin &&
               (text[last - 1] == '\r' || text[last - 1] == ' ' || text[last - 1] == '\t'))
            --last;
        vocab.push_back(text.substr(begin, last - begin));
        begin = end + 1;
    }
    if (vocab.empty()) throw std::runtime_error(std::string(fn) + ": " + path + ": holds no token");
    return vocab;
}

inline BertTokenizer::BertTokenizer(std::vector<std::string> vocab, BertTokenizerOptions options)
    : options_(std::move(options)), vocab_(std::move(vocab)) {
    constexpr const char* fn = "headwise::text::BertTokenizer::BertTokenizer";
    if (options_.max_length < 2)
        throw_invalid_argument(fn, "options.max_length", "must be at least 2 ([CLS] and [SEP])",
                               std::to_string(options_.max_length));
    if (options_.max_input_chars_per_word < 1)
        throw_invalid_argument(fn, "options.max_input_chars_per_word", "must be positive",
                               std::to_string(options_.max_input_chars_per_word));
    ids_.reserve(vocab_.size());
    // A token listed twice keeps its last id, as `tokenizers` reads a vocabulary file.
    for (std::size_t i = 0; i < vocab_.size(); ++i) {
        ids_[vocab_[i]] = static_cast<std::int64_t>(i);
        max_token_bytes_ = std::max(max_token_bytes_, vocab_[i].size());
    }
    auto special = [&](const char* what, const std::string& token) {
        const auto it = ids_.find(token);
        if (it == ids_.end())
            throw_invalid_argument(fn, std::string("options.") + what,
                                   "must be a token of the vocabulary",
                                   wordpiece_detail::quote(token));
        return it->second;
    };
    // Every token is checked before the trie is built.
    unk_id_ = special("unk_token", options_.unk_token);
    sep_id_ = special("sep_token", options_.sep_token);
    pad_id_ = special("pad_token", options_.pad_token);
    cls_id_ = special("cls_token", options_.cls_token);
    const std::int64_t mask_id = special("mask_token", options_.mask_token);
    std::vector<std::int64_t> additional;
    additional.reserve(options_.additional_special_tokens.size());
    for (const std::string& t : options_.additional_special_tokens)
        additional.push_back(special("additional_special_tokens", t));
    specials_.add(options_.unk_token, unk_id_);
    specials_.add(options_.sep_token, sep_id_);
    specials_.add(options_.pad_token, pad_id_);
    specials_.add(options_.cls_token, cls_id_);
    specials_.add(options_.mask_token, mask_id);
    for (std::size_t i = 0; i < additional.size(); ++i)
        specials_.add(options_.additional_special_tokens[i], additional[i]);
}

inline BertTokenizer BertTokenizer::from_directory(const std::string& dir,
                                                   std::optional<Index> max_length) {
    constexpr const char* fn = "headwise::text::BertTokenizer::from_directory";
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    BertTokenizerOptions o;
    // Where each special token was named, for the error when vocab.txt lacks it.
    std::unordered_map<std::string, std::string> named_in;
    // Whether an optional file is there, asked of the directory entry without opening it (an
    // open would block on a FIFO); read_json_file then refuses what is not a regular file.
    auto exists = [](const std::string& path) {
        std::error_code ec;
        return std::filesystem::exists(std::filesystem::symlink_status(path, ec));
    };
    auto read_token = [&](const nlohmann::json& j, const char* key, std::string& token,
                          const std::string& path) {
        const auto it = j.find(key);
        if (it == j.end() || it->is_null()) return false;
        // A special token is a string, or an AddedToken object {"content": "...", ...}.
        if (it->is_string()) {
            token = it->get<std::string>();
        } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
            token = (*it)["content"].get<std::string>();
        } else {
            throw std::runtime_error(std::string(fn) + ": " + path + ": '" + key +
                                     "' is neither a string nor an object with 'content', got " +
                                     detail::describe_json(*it));
        }
        named_in[key] = path;
        return true;
    };
    auto read_bool = [&](const nlohmann::json& j, const char* key,
                         const std::string& path) -> std::optional<bool> {
        const auto it = j.find(key);
        if (it == j.end() || it->is_null()) return std::nullopt;
        if (!it->is_boolean())
            throw std::runtime_error(std::string(fn) + ": " + path + ": '" + key +
                                     "' must be true, false or null, got " +
                                     detail::describe_json(*it));
        return it->get<bool>();
    };
    for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
        const std::string path = base + name;
        if (!exists(path)) continue;
        const nlohmann::json j = detail::read_json_file(fn, path);
        read_token(j, "unk_token", o.unk_token, path);
        read_token(j, "cls_token", o.cls_token, path);
        read_token(j, "sep_token", o.sep_token, path);
        read_token(j, "pad_token", o.pad_token, path);
        read_token(j, "mask_token", o.mask_token, path);
        if (const auto it = j.find("additional_special_tokens"); it != j.end() && it->is_array()) {
            o.additional_special_tokens.clear();
            for (const nlohmann::json& t : *it) {
                std::string token;
                const nlohmann::json holder = nlohmann::json::object({{"t", t}});
                read_token(holder, "t", token, path);
                o.additional_special_tokens.push_back(token);
            }
            named_in["additional_special_tokens"] = path;
        }
        if (std::string(name) != "tokenizer_config.json") continue;
        if (auto v = read_bool(j, "do_lower_case", path)) o.lowercase = *v;
        o.strip_accents = read_bool(j, "strip_accents", path);
        if (auto v = read_bool(j, "tokenize_chinese_chars", path)) o.tokenize_chinese_chars = *v;
        if (const auto it = j.find("model_max_length"); it != j.end() && it->is_number()) {
            // transformers writes a huge sentinel (1e30) for "no limit".
            const double m = it->get<double>();
            if (m >= 2 && m < 1e9) o.max_length = static_cast<Index>(m);
        }
    }
    if (max_length) o.max_length = *max_length;
    const std::string vocab_path = base + "vocab.txt";
    std::vector<std::string> vocab = read_vocab(vocab_path);
    // The special tokens must be in vocab.txt: said here, naming the file and where the token
    // was named, rather than by the constructor, which knows neither.
    {
        const std::unordered_set<std::string_view> tokens(vocab.begin(), vocab.end());
        auto check = [&](const char* key, const std::string& token) {
            if (tokens.count(token)) return;
            const auto it = named_in.find(key);
            throw std::runtime_error(
                std::string(fn) + ": " + vocab_path + ": " + key + " " +
                wordpiece_detail::quote(token) + " (" +
                (it == named_in.end() ? std::string("the default") : "from " + it->second) +
                ") is not a token of the vocabulary");
        };
        check("unk_token", o.unk_token);
        check("sep_token", o.sep_token);
        check("pad_token", o.pad_token);
        check("cls_token", o.cls_token);
        check("mask_token", o.mask_token);
        for (const std::string& t : o.additional_special_tokens)
            check("additional_special_tokens", t);
    }
    return BertTokenizer(std::move(vocab), std::move(o));
}

template <class F>
void BertTokenizer::for_each_piece(std::string_view text, F&& f) const {
    // Step 0: special tokens written in the text, leftmost-longest, matched on the raw bytes.
    // f(piece, byte offset of the piece, the special token's id or none). The trie makes each
    // position cost the length of the longest special token that starts there, whatever their
    // number.
    std::size_t start = 0, i = 0;
    while (i < text.size()) {
        const auto [length, id] = specials_.match(text, i);
        if (length == 0) {
            ++i;
            continue;
        }
        if (i > start) f(text.substr(start, i - start), start, std::optional<std::int64_t>());
        f(text.substr(i, length), i, std::optional<std::int64_t>(id));
        i += length;
        start = i;
    }
    if (text.size() > start) f(text.substr(start), start, std::optional<std::int64_t>());
}

inline void BertTokenizer::clean_into(const std::u32string& raw, std::u32string& s) const {
    // Steps 1-2, per character.
    s.reserve(raw.size());
    for (char32_t ch : raw) {
        const auto c = static_cast<std::int32_t>(ch);
        if (options_.clean_text) {
            if (c == 0 || c == 0xFFFD || detail::is_control(c)) continue;
            if (detail::is_whitespace(c)) {
                s.push_back(U' ');
                continue;
            }
        }
        if (options_.tokenize_chinese_chars && detail::is_chinese_char(c)) {
            s.push_back(U' ');
            s.push_back(ch);
            s.push_back(U' ');
            continue;
        }
        s.push_back(ch);
    }
}

inline void BertTokenizer::normalise_into(const char32_t* begin, const char32_t* end,
                                          std::u32string& out) const {
    constexpr const char* fn = "headwise::text::BertTokenizer::tokenize";
    std::u32string s;
    // Step 3: canonical decomposition (NFD), then without the nonspacing marks (Mn). NFD also
    // puts each run of combining marks (characters of non-zero combining class) in canonical
    // order: a stable sort by combining class, which starters (class 0) bound. Sorting the
    // marks that survive alone gives the same order as sorting all then dropping the Mn ones,
    // and a sort is O(n log n) where utf8proc_map's exchange sort is quadratic in the length of
    // a run of alternating classes.
    if (options_.strip_accents.value_or(options_.lowercase)) {
        auto ccc = [](char32_t c) {
            return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
        };
        auto by_class = [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); };
        std::size_t run = 0;  // where the current run of surviving marks starts in `s`
        auto order_run = [&] {
            if (s.size() - run > 1)
                std::stable_sort(s.begin() + static_cast<std::ptrdiff_t>(run), s.end(), by_class);
        };
        utf8proc_int32_t parts[16];
        for (const char32_t* p = begin; p != end; ++p) {
            int boundclass = 0;
            const utf8proc_ssize_t n = utf8proc_decompose_char(
                static_cast<utf8proc_int32_t>(*p), parts, 16, UTF8PROC_DECOMPOSE, &boundclass);
            if (n < 0 || n > 16)  // a canonical decomposition has at most 4 characters
                throw std::runtime_error(std::string(fn) + ": utf8proc_decompose_char: " +
                                         (n < 0 ? utf8proc_errmsg(n) : "decomposition too long"));
            for (utf8proc_ssize_t k = 0; k < n; ++k) {
                const auto c = static_cast<char32_t>(parts[k]);
                if (ccc(c) == 0) {  // a starter ends the run of marks before it
                    order_run();
                    if (utf8proc_category(parts[k]) != UTF8PROC_CATEGORY_MN) s.push_back(c);
                    run = s.size();
                } else if (utf8proc_category(parts[k]) != UTF8PROC_CATEGORY_MN) {
                    s.push_back(c);
                }
            }
        }
        order_run();
    } else {
        s.assign(begin, end);
    }
    // Step 4: full lower-case mapping. Unicode's simple mapping (utf8proc_tolower) is the full
    // one but for U+0130 (capital I with dot above), whose full lower case is i + U+0307.
    if (options_.lowercase) {
        for (char32_t ch : s) {
            if (ch == 0x130) {
                out.push_back(U'i');
                out.push_back(0x307);
            } else {
                out.push_back(
                    static_cast<char32_t>(utf8proc_tolower(static_cast<std::int32_t>(ch))));
            }
        }
    } else {
        out += s;
    }
}

inline void BertTokenizer::split_words(const std::u32string& s,
                                       std::vector<std::string>& words) const {
    // Step 5: white space ends a word; punctuation is a word of its own.
    std::size_t begin = 0;
    for (std::size_t i = 0; i <= s.size(); ++i) {
        const bool end = i == s.size();
        const auto c = end ? 0 : static_cast<std::int32_t>(s[i]);
        const bool space = !end && detail::is_whitespace(c);
        const bool punct = !end && !space && detail::is_punctuation(c);
        if (end || space || punct) {
            if (i > begin) words.push_back(detail::to_utf8(s, begin, i));
            if (punct) words.push_back(detail::to_utf8(s, i, i + 1));
            begin = i + 1;
        }
    }
}

template <class F>
void BertTokenizer::for_each_word(std::string_view text, F&& f) const {
    constexpr const char* fn = "headwise::text::BertTokenizer::tokenize";
    bool more = true;
    std::u32string raw, cleaned, normalised;
    std::vector<std::string> words;
    for_each_piece(
        text, [&](std::string_view piece, std::size_t offset, std::optional<std::int64_t> special) {
            if (special) {  // a special token written in the text stays whole
                if (more) more = f(piece, special);
                return;
            }
            raw.clear();
            detail::decode_utf8(fn, piece, offset, raw);  // all of it: invalid UTF-8 is an error
            if (!more) return;
            cleaned.clear();
            clean_into(raw, cleaned);
            // Steps 3-5 run from one white space to the next. White space survives cleaning only as
            // characters of combining class 0 that decompose to white space, which NFD's ordering
            // does not cross and which end a word: normalising the runs one by one gives what
            // normalising the whole piece would, and what is not needed is never normalised.
            const char32_t* p = cleaned.data();
            const char32_t* const last = p + cleaned.size();
            while (p != last && more) {
                const char32_t* q = p;
                while (q != last && !detail::is_whitespace(static_cast<std::int32_t>(*q))) ++q;
                if (q != last) ++q;
                normalised.clear();
                normalise_into(p, q, normalised);
                words.clear();
                split_words(normalised, words);
                for (const std::string& w : words)
                    if (!(more = f(std::string_view(w), std::optional<std::int64_t>()))) break;
                p = q;
            }
        });
}

inline std::vector<std::string> BertTokenizer::basic_tokenize(std::string_view text) const {
    std::vector<std::string> words;
    for_each_word(text, [&](std::string_view w, std::optional<std::int64_t>) {
        words.emplace_back(w);
        return true;
    });
    return words;
}

inline std::vector<std::int64_t> BertTokenizer::wordpiece(std::string_view word) const {
    std::u32string chars;
    detail::decode_utf8("headwise::text::BertTokenizer::wordpiece", word, 0, chars);
    if (chars.empty()) return {};
    if (static_cast<Index>(chars.size()) > options_.max_input_chars_per_word) return {unk_id_};
    // Byte offset of each character, so that candidate pieces are substrings of `word`.
    std::vector<std::size_t> at(chars.size() + 1, 0);
    for (std::size_t i = 0; i < chars.size(); ++i) {
        const char32_t c = chars[i];
        at[i + 1] = at[i] + (c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4);
    }
    std::vector<std::int64_t> ids;
    std::string candidate;
    std::size_t start = 0;
    while (start < chars.size()) {
        // The longest candidate is the longest vocabulary entry: a piece that would make a
        // longer one cannot match, and is not looked up.
        const std::string& prefix = options_.continuing_subword_prefix;
        const std::size_t fixed = start > 0 ? prefix.size() : 0;
        std::size_t end = start;
        if (fixed < max_token_bytes_)
            end = static_cast<std::size_t>(
                      std::upper_bound(at.begin() + static_cast<std::ptrdiff_t>(start) + 1,
                                       at.end(), at[start] + (max_token_bytes_ - fixed)) -
                      at.begin()) -
                  1;
        std::int64_t found = -1;
        while (end > start) {
            candidate.clear();
            if (start > 0) candidate = prefix;
            candidate.append(word.substr(at[start], at[end] - at[start]));
            const auto it = ids_.find(candidate);
            if (it != ids_.end()) {
                found = it->second;
                break;
            }
            --end;
        }
        if (found < 0) return {unk_id_};  // a part no entry matches: the whole word
        ids.push_back(found);
        start = end;
    }
    return ids;
}

inline std::vector<std::int64_t> BertTokenizer::tokenize_up_to(std::string_view text,
                                                               std::size_t limit) const {
    std::vector<std::int64_t> ids;
    if (limit == 0) {  // no id is kept: the text is only checked to be UTF-8
        std::u32string raw;
        for_each_piece(text, [&](std::string_view piece, std::size_t offset,
                                 std::optional<std::int64_t> special) {
            raw.clear();
            if (!special)
                detail::decode_utf8("headwise::text::BertTokenizer::tokenize", piece, offset, raw);
        });
        return ids;
    }
    for_each_word(text, [&](std::string_view w, std::optional<std::int64_t> special) {
        if (special) {
            ids.push_back(*special);
        } else {
            const std::vector<std::int64_t> pieces = wordpiece(w);
            ids.insert(ids.end(), pieces.begin(), pieces.end());
        }
        return ids.size() < limit;
    });
    return ids;
}

inline std::vector<std::int64_t> BertTokenizer::tokenize(std::string_view text) const {
    return tokenize_up_to(text, static_cast<std::size_t>(-1));
}

inline std::vector<std::int64_t> BertTokenizer::encode(std::string_view text) const {
    // Truncation keeps the first ids; the words after them are not normalised.
    const auto keep = static_cast<std::size_t>(options_.max_length - 2);
    std::vector<std::int64_t> body = tokenize_up_to(text, keep);
    if (body.size() > keep) body.resize(keep);
    std::vector<std::int64_t> ids;
    ids.reserve(body.size() + 2);
    ids.push_back(cls_id_);
    ids.insert(ids.end(), body.begin(), body.end());
    ids.push_back(sep_id_);
    return ids;
}

inline BertBatch BertTokenizer::encode_batch(const std::vector<std::string>& texts) const {
    std::vector<std::vector<std::int64_t>> all;
    all.reserve(texts.size());
    std::size_t longest = 0;
    for (const std::string& t : texts) {
        all.push_back(encode(t));
        longest = std::max(longest, all.back().size());
    }
    const auto B = static_cast<Index>(texts.size()), L = static_cast<Index>(longest);
    BertBatch batch;
    batch.input_ids = Tensor<std::int64_t>(Shape{B, L});
    batch.padding_mask = Tensor<bool>(Shape{B, L});
    for (Index b = 0; b < B; ++b) {
        const std::vector<std::int64_t>& ids = all[static_cast<std::size_t>(b)];
        for (Index t = 0; t < L; ++t) {
            const bool pad = t >= static_cast<Index>(ids.size());
            batch.input_ids.data()[b * L + t] = pad ? pad_id_ : ids[static_cast<std::size_t>(t)];
            batch.padding_mask.data()[b * L + t] = pad;
        }
        batch.lengths.push_back(static_cast<Index>(ids.size()));
    }
    return batch;
}

inline std::optional<std::int64_t> BertTokenizer::token_to_id(std::string_view token) const {
    const auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
}

inline const std::string& BertTokenizer::id_to_token(std::int64_t id) const {
    if (id < 0 || id >= static_cast<std::int64_t>(vocab_.size()))
        throw std::out_of_range(
            "headwise::text::BertTokenizer::id_to_token: id: expected an id "
            "in [0, " +
            std::to_string(vocab_.size()) + "), got " + std::to_string(id));
    return vocab_[static_cast<std::size_t>(id)];
}

}  // namespace headwise::text
