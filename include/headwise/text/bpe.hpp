// SPDX-License-Identifier: MIT
// BpeTokenizer: byte-level BPE (GPT-2, SmolLM2) from a tokenizer.json or GGUF metadata, as
// Hugging Face's `tokenizers` encodes and decodes.
#pragma once

#if !__has_include(<utf8proc.h>) || !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/text/bpe.hpp needs utf8proc (Debian: libutf8proc-dev) and nlohmann/json \
(Debian: nlohmann-json3-dev); headwise::headwise links both when CMake finds them"
#endif

#include <utf8proc.h>  // utf8proc_iterate
#include <nlohmann/json.hpp>

#include <algorithm>      // std::max
#include <array>          // std::array
#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t, std::int32_t, std::uint64_t
#include <functional>     // std::greater
#include <optional>       // std::optional
#include <queue>          // std::priority_queue
#include <stdexcept>      // std::invalid_argument, std::runtime_error, std::out_of_range
#include <string>         // std::string, std::to_string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::move, std::pair
#include <vector>         // std::vector

#include "../error.hpp"
#include "../io/detail/json_file.hpp"
#include "../io/gguf.hpp"
#include "detail/bpe_split.hpp"
#include "detail/special_tokens.hpp"
#include "detail/unicode.hpp"

namespace headwise::text {

/// How text is cut into words before BPE.
enum class BpePreTokenizer {
    byte_level,         // GPT-2's split regex (tokenizers' ByteLevel with use_regex)
    digits_byte_level,  // each \p{N} character alone first, then GPT-2's regex on the rest
                        // (SmolLM2: Sequence[Digits(individual_digits), ByteLevel])
};

/// A token matched whole in the text before it is split (tokenizers' added tokens).
struct BpeAddedToken {
    std::string content;
    std::int64_t id = 0;
    bool special = true;  // left out by decode(ids, skip_special = true)
};

/// Everything a byte-level BPE tokenizer is made of. Tokens and merges are spelled in GPT-2's
/// byte alphabet (each byte a printable character: ' ' is "Ġ", '\n' is "Ċ").
struct BpeConfig {
    std::vector<std::string> tokens;                          // id -> token
    std::vector<std::pair<std::string, std::string>> merges;  // by rank, best first
    std::vector<BpeAddedToken> added;
    BpePreTokenizer pre_tokenizer = BpePreTokenizer::byte_level;
    bool add_prefix_space = false;  // a space before each piece that does not start with one
    bool ignore_merges = false;     // a word that is a token is that token, merges unasked
    std::optional<std::int64_t> unk_id;
    std::optional<std::int64_t> bos_id, eos_id;
    bool add_bos = false;  // encode(text) starts with bos_id
};

/// Byte-level BPE (Radford et al. 2019; Sennrich et al. 2016) as `tokenizers` runs it:
///  0. added tokens written in the text are matched first, leftmost-longest, and pass through;
///  1. the rest is split into words: GPT-2's regex ('s 't 're 've 'm 'll 'd, " ?letters",
///     " ?numbers", " ?other", white space that leaves its last character to a following word),
///     for SmolLM2 after each number character has been cut out on its own;
///  2. each word's UTF-8 bytes become characters of GPT-2's byte alphabet, and its symbols are
///     merged pairwise, the adjacent pair of lowest merge rank first (leftmost among equals),
///     until no pair has a merge. A heap keeps this O(n log n) in the word's length: a megabyte
///     of one letter is one word.
/// decode() maps tokens back to bytes and reads them as UTF-8, an invalid sequence becoming
/// U+FFFD per maximal subpart (Rust's from_utf8_lossy, as `tokenizers` decodes).
/// Unicode categories come from utf8proc (its Unicode version; `tokenizers` uses Oniguruma's).
class BpeTokenizer {
public:
    /// Throws std::invalid_argument naming the field: a merge whose part or result is not a
    /// token, an added token's or special id outside the vocabulary, an empty vocabulary.
    explicit BpeTokenizer(BpeConfig config);

    /// From a Hugging Face tokenizer.json: model.type "BPE" (vocab, merges as "a b" strings or
    /// [a, b] pairs), added_tokens, normalizer null, pre_tokenizer ByteLevel or
    /// Sequence[Digits(individual_digits: true), ByteLevel], decoder ByteLevel or null,
    /// post_processor ByteLevel, null or TemplateProcessing with at most one special token
    /// before $A. Throws std::runtime_error naming the file and the field, and naming what is
    /// supported for a kind that is not.
    static BpeTokenizer from_tokenizer_json(const std::string& path);
    /// The same from a parsed value; `name` stands for the file in messages.
    static BpeTokenizer from_json(const nlohmann::json& j, const std::string& name);

    /// From GGUF metadata: tokenizer.ggml.model "gpt2", tokens, merges, token_type (3 control
    /// and 4 user-defined are added tokens, 3 special), bos/eos_token_id, add_bos_token,
    /// tokenizer.ggml.pre "smollm" (digits alone first) or "gpt-2"/"gpt2"/"default" (GPT-2's
    /// regex). Throws std::runtime_error naming the file and the key.
    static BpeTokenizer from_gguf(const io::GgufFile& file);

    /// The ids of UTF-8 `text`, BOS first when the tokenizer adds it and `add_special`. With
    /// parse_special false, special added tokens written in the text are encoded as plain text
    /// (llama.cpp's tokenize with parse_special = false); the other added tokens still match.
    /// Throws std::invalid_argument naming the byte offset of invalid UTF-8.
    std::vector<std::int64_t> encode(std::string_view text, bool add_special = true,
                                     bool parse_special = true) const;
    /// The text of `ids`; throws std::out_of_range for an id outside [0, vocab_size()).
    std::string decode(const std::vector<std::int64_t>& ids, bool skip_special = false) const;
    /// The bytes of one token (an added token's content as written).
    std::string token_bytes(std::int64_t id) const;

    std::int64_t vocab_size() const noexcept { return static_cast<std::int64_t>(tokens_.size()); }
    std::optional<std::int64_t> token_to_id(std::string_view token) const;
    const std::string& id_to_token(std::int64_t id) const;
    std::optional<std::int64_t> bos_id() const noexcept { return config_.bos_id; }
    std::optional<std::int64_t> eos_id() const noexcept { return config_.eos_id; }
    bool is_special(std::int64_t id) const;
    const BpeConfig& config() const noexcept { return config_; }

private:
    struct Merge {
        std::int32_t rank;
        std::int32_t id;
    };
    void encode_segment(std::string_view text, std::size_t offset,
                        std::vector<std::int64_t>& out) const;
    void encode_word(std::string_view bytes, std::vector<std::int64_t>& out) const;
    static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
               static_cast<std::uint32_t>(b);
    }

    BpeConfig config_;
    std::vector<std::string> tokens_;
    std::unordered_map<std::string, std::int64_t> ids_;
    std::unordered_map<std::uint64_t, Merge> merges_;
    std::array<std::int32_t, 256> byte_ids_{};  // the token of each byte's character; -1: none
    std::array<std::string, 256> byte_chars_;   // each byte's character in UTF-8
    std::unordered_map<std::int32_t, unsigned char> char_bytes_;  // the inverse
    std::vector<bool> special_;                                   // by id
    std::vector<bool> added_;                                     // by id
    detail::SpecialTokenTrie specials_;     // the added tokens, matched in the raw text
    detail::SpecialTokenTrie plain_added_;  // the added tokens that are not special
};

// ---- definitions ----------------------------------------------------------------------------

namespace bpe_detail {

/// GPT-2's byte alphabet (Radford et al.'s encoder.py bytes_to_unicode): the printable bytes
/// '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 for U+0100 onwards in
/// byte order, so that every token is printable text.
inline std::array<std::int32_t, 256> byte_alphabet() {
    std::array<std::int32_t, 256> a{};
    std::int32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        a[static_cast<std::size_t>(b)] = printable ? b : next++;
    }
    return a;
}

inline std::string quote(std::string_view s) { return detail::quote_bounded(std::string(s)); }

/// Appends `bytes` read as UTF-8 to `out`, each maximal subpart of an invalid sequence
/// (Unicode 15, 3.9, "U+FFFD substitution of maximal subparts") replaced by U+FFFD.
inline void append_utf8_lossy(std::string_view bytes, std::string& out) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = bytes.size();
    std::size_t i = 0;
    while (i < n) {
        const unsigned char b = p[i];
        if (b < 0x80) {
            out.push_back(static_cast<char>(b));
            ++i;
            continue;
        }
        std::size_t need = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            if (b == 0xE0) lo = 0xA0;
            if (b == 0xED) hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;
        }
        std::size_t k = 1;
        bool ok = need > 0;
        for (; ok && k <= need; ++k) {
            if (i + k >= n) {
                ok = false;
                break;
            }
            const unsigned char c = p[i + k];
            if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) {
                ok = false;
                break;
            }
        }
        if (ok) {
            out.append(bytes.substr(i, need + 1));
            i += need + 1;
        } else {
            out.append("\xEF\xBF\xBD");
            i += k;  // the lead byte and the continuation bytes that were right
        }
    }
}

}  // namespace bpe_detail

inline BpeTokenizer::BpeTokenizer(BpeConfig config) : config_(std::move(config)) {
    constexpr const char* fn = "headwise::text::BpeTokenizer::BpeTokenizer";
    if (config_.tokens.empty())
        throw_invalid_argument(fn, "config.tokens", "must not be empty", "none");
    // Everything is checked before any member is filled.
    std::unordered_map<std::string, std::int64_t> ids;
    ids.reserve(config_.tokens.size());
    for (std::size_t i = 0; i < config_.tokens.size(); ++i)
        ids[config_.tokens[i]] = static_cast<std::int64_t>(i);
    const auto n = static_cast<std::int64_t>(config_.tokens.size());
    auto check_id = [&](const std::string& what, std::int64_t id) {
        if (id < 0 || id >= n)
            throw_invalid_argument(fn, what, "must be in [0, " + std::to_string(n) + ")",
                                   std::to_string(id));
    };
    for (std::size_t i = 0; i < config_.added.size(); ++i) {
        const BpeAddedToken& t = config_.added[i];
        check_id("config.added[" + std::to_string(i) + "].id", t.id);
        if (t.content.empty())
            throw_invalid_argument(fn, "config.added[" + std::to_string(i) + "].content",
                                   "must not be empty", "''");
    }
    if (config_.unk_id) check_id("config.unk_id", *config_.unk_id);
    if (config_.bos_id) check_id("config.bos_id", *config_.bos_id);
    if (config_.eos_id) check_id("config.eos_id", *config_.eos_id);
    if (config_.add_bos && !config_.bos_id)
        throw_invalid_argument(fn, "config.add_bos", "needs config.bos_id", "none");
    if (config_.merges.size() > std::size_t{0x7FFFFFFF})
        throw_invalid_argument(fn, "config.merges", "must number fewer than 2^31",
                               std::to_string(config_.merges.size()));
    std::unordered_map<std::uint64_t, Merge> merges;
    merges.reserve(config_.merges.size());
    for (std::size_t r = 0; r < config_.merges.size(); ++r) {
        const std::string& a = config_.merges[r].first;
        const std::string& b = config_.merges[r].second;
        const auto find = [&](const std::string& t) {
            const auto it = ids.find(t);
            if (it == ids.end())
                throw_invalid_argument(
                    fn, "config.merges[" + std::to_string(r) + "]",
                    "must name tokens of the vocabulary, " + bpe_detail::quote(t) + " is not one",
                    bpe_detail::quote(a) + " " + bpe_detail::quote(b));
            return static_cast<std::int32_t>(it->second);
        };
        const std::int32_t ia = find(a), ib = find(b), im = find(a + b);
        // A pair listed twice keeps its first (best) rank.
        merges.emplace(pair_key(ia, ib), Merge{static_cast<std::int32_t>(r), im});
    }
    tokens_ = config_.tokens;
    ids_ = std::move(ids);
    merges_ = std::move(merges);
    const auto alphabet = bpe_detail::byte_alphabet();
    for (std::size_t b = 0; b < 256; ++b) {
        std::string ch;
        detail::append_utf8(ch, alphabet[b]);
        const auto it = ids_.find(ch);
        byte_ids_[b] = it == ids_.end() ? -1 : static_cast<std::int32_t>(it->second);
        byte_chars_[b] = ch;
        char_bytes_[alphabet[b]] = static_cast<unsigned char>(b);
    }
    special_.assign(tokens_.size(), false);
    added_.assign(tokens_.size(), false);
    for (const BpeAddedToken& t : config_.added) {
        special_[static_cast<std::size_t>(t.id)] =
            special_[static_cast<std::size_t>(t.id)] || t.special;
        added_[static_cast<std::size_t>(t.id)] = true;
        tokens_[static_cast<std::size_t>(t.id)] = t.content;
        specials_.add(t.content, t.id);
    }
    for (const BpeAddedToken& t : config_.added) {
        if (!special_[static_cast<std::size_t>(t.id)]) plain_added_.add(t.content, t.id);
    }
}

inline std::vector<std::int64_t> BpeTokenizer::encode(std::string_view text, bool add_special,
                                                      bool parse_special) const {
    std::vector<std::int64_t> out;
    if (add_special && config_.add_bos) out.push_back(*config_.bos_id);
    // Step 0: the text between added tokens is encoded segment by segment.
    const detail::SpecialTokenTrie& added = parse_special ? specials_ : plain_added_;
    std::size_t begin = 0, i = 0;
    while (i < text.size()) {
        const auto [len, id] =
            added.empty() ? std::pair<std::size_t, std::int64_t>{0, -1} : added.match(text, i);
        if (len == 0) {
            ++i;
            continue;
        }
        encode_segment(text.substr(begin, i - begin), begin, out);
        out.push_back(id);
        i += len;
        begin = i;
    }
    encode_segment(text.substr(begin), begin, out);
    return out;
}

inline void BpeTokenizer::encode_segment(std::string_view text, std::size_t offset,
                                         std::vector<std::int64_t>& out) const {
    if (text.empty()) return;
    // The code points, their byte offsets and regex classes.
    std::vector<std::int32_t> cps;
    std::vector<std::size_t> at;
    std::vector<detail::SplitClass> cls;
    cps.reserve(text.size());
    at.reserve(text.size() + 1);
    cls.reserve(text.size());
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
    std::size_t i = 0;
    while (i < text.size()) {
        utf8proc_int32_t c = p[i];
        utf8proc_ssize_t n = 1;
        if (c >= 0x80) {
            n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &c);
            if (n <= 0)
                throw std::invalid_argument(
                    "headwise::text::BpeTokenizer::encode: text: invalid UTF-8 at byte " +
                    std::to_string(offset + i));
        }
        cps.push_back(c);
        at.push_back(i);
        cls.push_back(detail::split_class(c));
        i += static_cast<std::size_t>(n);
    }
    at.push_back(text.size());
    std::string word;
    auto piece = [&](std::size_t a, std::size_t b) {
        const std::string_view bytes = text.substr(at[a], at[b] - at[a]);
        if (config_.add_prefix_space && bytes.front() != ' ') {
            word.assign(1, ' ');
            word.append(bytes);
            encode_word(word, out);
        } else {
            encode_word(bytes, out);
        }
    };
    // ByteLevel's add_prefix_space prepends to each string it is given: the whole segment, or
    // with Digits before it, each run between numbers and each number.
    auto byte_level = [&](std::size_t a, std::size_t b) {
        if (!config_.add_prefix_space || cps[a] == ' ') {
            detail::split_byte_level(cps, cls, a, b, piece);
            return;
        }
        std::vector<std::int32_t> cps2{' '};
        std::vector<detail::SplitClass> cls2{detail::SplitClass::space};
        cps2.insert(cps2.end(), cps.begin() + static_cast<std::ptrdiff_t>(a),
                    cps.begin() + static_cast<std::ptrdiff_t>(b));
        cls2.insert(cls2.end(), cls.begin() + static_cast<std::ptrdiff_t>(a),
                    cls.begin() + static_cast<std::ptrdiff_t>(b));
        std::string s;
        for (std::int32_t c : cps2) detail::append_utf8(s, c);
        std::vector<std::size_t> at2{0};
        for (std::int32_t c : cps2) {
            std::string one;
            detail::append_utf8(one, c);
            at2.push_back(at2.back() + one.size());
        }
        detail::split_byte_level(cps2, cls2, 0, cps2.size(), [&](std::size_t x, std::size_t y) {
            encode_word(std::string_view(s).substr(at2[x], at2[y] - at2[x]), out);
        });
    };
    if (config_.pre_tokenizer == BpePreTokenizer::byte_level) {
        byte_level(0, cps.size());
        return;
    }
    std::size_t start = 0;
    for (std::size_t k = 0; k < cps.size(); ++k) {
        if (cls[k] != detail::SplitClass::number) continue;
        if (k > start) byte_level(start, k);
        byte_level(k, k + 1);
        start = k + 1;
    }
    if (start < cps.size()) byte_level(start, cps.size());
}

inline void BpeTokenizer::encode_word(std::string_view bytes,
                                      std::vector<std::int64_t>& out) const {
    if (config_.ignore_merges || bytes.size() == 1) {
        std::string mapped;
        for (const char ch : bytes) mapped += byte_chars_[static_cast<unsigned char>(ch)];
        if (const auto it = ids_.find(mapped);
            it != ids_.end() && !added_[static_cast<std::size_t>(it->second)]) {
            out.push_back(it->second);
            return;
        }
    }
    // Symbols as a doubly linked list over the bytes; a merged symbol keeps the left slot.
    struct Symbol {
        std::int32_t id;
        std::int32_t prev, next;
    };
    std::vector<Symbol> sym;
    sym.reserve(bytes.size());
    for (const char ch : bytes) {
        const std::int32_t id = byte_ids_[static_cast<unsigned char>(ch)];
        if (id < 0) {
            // A byte the vocabulary lacks: the unknown token, or nothing (tokenizers drops it).
            if (config_.unk_id) sym.push_back({static_cast<std::int32_t>(*config_.unk_id), 0, 0});
            continue;
        }
        sym.push_back({id, 0, 0});
    }
    const auto n = static_cast<std::int32_t>(sym.size());
    for (std::int32_t k = 0; k < n; ++k) {
        sym[static_cast<std::size_t>(k)].prev = k - 1;
        sym[static_cast<std::size_t>(k)].next = k + 1 < n ? k + 1 : -1;
    }
    // (rank, left slot): the lowest rank first, the leftmost among equal ranks.
    using Entry = std::pair<std::int32_t, std::int32_t>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push = [&](std::int32_t left) {
        const std::int32_t right = sym[static_cast<std::size_t>(left)].next;
        if (right < 0) return;
        const auto it = merges_.find(pair_key(sym[static_cast<std::size_t>(left)].id,
                                              sym[static_cast<std::size_t>(right)].id));
        if (it != merges_.end()) heap.push({it->second.rank, left});
    };
    for (std::int32_t k = 0; k + 1 < n; ++k) push(k);
    while (!heap.empty()) {
        const auto [rank, left] = heap.top();
        heap.pop();
        Symbol& a = sym[static_cast<std::size_t>(left)];
        if (a.id < 0 || a.next < 0) continue;  // merged away, or nothing to its right now
        Symbol& b = sym[static_cast<std::size_t>(a.next)];
        const auto it = merges_.find(pair_key(a.id, b.id));
        if (it == merges_.end() || it->second.rank != rank) continue;  // the pair changed
        a.id = it->second.id;
        b.id = -1;
        a.next = b.next;
        if (a.next >= 0) sym[static_cast<std::size_t>(a.next)].prev = left;
        if (a.prev >= 0) push(a.prev);
        push(left);
    }
    for (std::int32_t k = n > 0 ? 0 : -1; k >= 0; k = sym[static_cast<std::size_t>(k)].next)
        out.push_back(sym[static_cast<std::size_t>(k)].id);
}

inline std::string BpeTokenizer::token_bytes(std::int64_t id) const {
    const std::string& t = id_to_token(id);
    if (added_[static_cast<std::size_t>(id)]) return t;
    // A token whose every character is in the byte alphabet is those bytes; any other is its
    // own UTF-8 (tokenizers' ByteLevel decoder).
    std::string bytes;
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(t.data());
    std::size_t i = 0;
    while (i < t.size()) {
        utf8proc_int32_t c = 0;
        const utf8proc_ssize_t n =
            utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(t.size() - i), &c);
        const auto it = n > 0 ? char_bytes_.find(c) : char_bytes_.end();
        if (it == char_bytes_.end()) return t;
        bytes.push_back(static_cast<char>(it->second));
        i += static_cast<std::size_t>(n);
    }
    return bytes;
}

inline std::string BpeTokenizer::decode(const std::vector<std::int64_t>& ids,
                                        bool skip_special) const {
    for (const std::int64_t id : ids) (void)id_to_token(id);  // every id checked first
    std::string bytes;
    for (const std::int64_t id : ids) {
        if (skip_special && special_[static_cast<std::size_t>(id)]) continue;
        bytes += token_bytes(id);
    }
    std::string out;
    out.reserve(bytes.size());
    bpe_detail::append_utf8_lossy(bytes, out);
    return out;
}

inline std::optional<std::int64_t> BpeTokenizer::token_to_id(std::string_view token) const {
    const auto it = ids_.find(std::string(token));
    if (it != ids_.end()) return it->second;
    for (const BpeAddedToken& t : config_.added)
        if (t.content == token) return t.id;
    return std::nullopt;
}

inline const std::string& BpeTokenizer::id_to_token(std::int64_t id) const {
    if (id < 0 || id >= vocab_size())
        throw std::out_of_range("headwise::text::BpeTokenizer: id " + std::to_string(id) +
                                " is outside [0, " + std::to_string(vocab_size()) + ")");
    return tokens_[static_cast<std::size_t>(id)];
}

inline bool BpeTokenizer::is_special(std::int64_t id) const {
    (void)id_to_token(id);
    return special_[static_cast<std::size_t>(id)];
}

// ---- tokenizer.json -------------------------------------------------------------------------

inline BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& path) {
    return from_json(
        detail::read_json_file("headwise::text::BpeTokenizer::from_tokenizer_json", path), path);
}

inline BpeTokenizer BpeTokenizer::from_json(const nlohmann::json& j, const std::string& name) {
    constexpr const char* fn = "headwise::text::BpeTokenizer::from_json";
    auto fail = [&](const std::string& field, const std::string& what) -> void {
        throw std::runtime_error(std::string(fn) + ": " + name + ": " + field + ": " + what);
    };
    auto got = [](const nlohmann::json& v) { return ", got " + detail::describe_json(v); };
    if (!j.is_object()) fail("the top level", "must be an object" + got(j));
    auto field = [&](const nlohmann::json& obj, const char* key) -> const nlohmann::json& {
        static const nlohmann::json null;
        const auto it = obj.find(key);
        return it == obj.end() ? null : *it;
    };
    auto flag = [&](const nlohmann::json& obj, const std::string& where, const char* key,
                    bool fallback) {
        const nlohmann::json& v = field(obj, key);
        if (v.is_null()) return fallback;
        if (!v.is_boolean()) fail(where + "." + key, "must be true or false" + got(v));
        return v.get<bool>();
    };
    BpeConfig c;
    // model
    const nlohmann::json& model = field(j, "model");
    if (!model.is_object()) fail("model", "must be an object" + got(model));
    const nlohmann::json& type = field(model, "type");
    if (!type.is_string() || type.get<std::string>() != "BPE")
        fail("model.type", "must be \"BPE\" (the only model headwise reads here)" + got(type));
    const nlohmann::json& vocab = field(model, "vocab");
    if (!vocab.is_object()) fail("model.vocab", "must be an object of token: id" + got(vocab));
    // Ids are dense from 0 over the vocabulary and the added tokens: any id past their number
    // is refused before anything is sized by it.
    const nlohmann::json& added = field(j, "added_tokens");
    if (!added.is_null() && !added.is_array())
        fail("added_tokens", "must be an array" + got(added));
    const std::size_t limit = vocab.size() + (added.is_array() ? added.size() : 0);
    auto check_id = [&](const std::string& where, const nlohmann::json& id) {
        if (!id.is_number_unsigned()) fail(where, "must be a non-negative integer" + got(id));
        if (id.get<std::uint64_t>() >= limit)
            fail(where, "must be below " + std::to_string(limit) +
                            " (ids are dense from 0 over the vocabulary and added tokens)" +
                            got(id));
        return id.get<std::size_t>();
    };
    std::size_t size = 0;
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
        size =
            std::max(size, check_id("model.vocab[" + bpe_detail::quote(it.key()) + "]", *it) + 1);
    for (std::size_t i = 0; added.is_array() && i < added.size(); ++i)
        if (added[i].is_object())
            size = std::max(
                size,
                check_id("added_tokens[" + std::to_string(i) + "].id", field(added[i], "id")) + 1);
    std::vector<std::optional<std::string>> tokens(size);
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
        tokens[it->get<std::size_t>()] = it.key();
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const nlohmann::json& v = field(model, key);
        if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty()))
            fail(std::string("model.") + key,
                 "must be null or \"\" (byte-level BPE has none)" + got(v));
    }
    if (flag(model, "model", "byte_fallback", false))
        fail("model.byte_fallback", "must be false (byte-level BPE needs no fallback), got true");
    if (const nlohmann::json& d = field(model, "dropout");
        !d.is_null() && !(d.is_number() && d.get<double>() == 0.0))
        fail("model.dropout", "must be null or 0 (encoding is deterministic here)" + got(d));
    c.ignore_merges = flag(model, "model", "ignore_merges", false);
    const nlohmann::json& merges = field(model, "merges");
    if (!merges.is_array()) fail("model.merges", "must be an array" + got(merges));
    c.merges.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
        const nlohmann::json& m = merges[r];
        const std::string where = "model.merges[" + std::to_string(r) + "]";
        if (m.is_string()) {
            const std::string& s = m.get_ref<const std::string&>();
            const std::size_t sp = s.find(' ');
            if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
                s.find(' ', sp + 1) != std::string::npos)
                fail(where, "must be two tokens and one space between them" + got(m));
            c.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            c.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            fail(where, "must be \"a b\" or [\"a\", \"b\"]" + got(m));
        }
    }
    const nlohmann::json& unk = field(model, "unk_token");
    if (!unk.is_null() && !unk.is_string())
        fail("model.unk_token", "must be a string or null" + got(unk));
    // added_tokens
    for (std::size_t i = 0; added.is_array() && i < added.size(); ++i) {
        const nlohmann::json& a = added[i];
        const std::string where = "added_tokens[" + std::to_string(i) + "]";
        if (!a.is_object()) fail(where, "must be an object" + got(a));
        const nlohmann::json& id = field(a, "id");
        const nlohmann::json& content = field(a, "content");
        if (!content.is_string() || content.get_ref<const std::string&>().empty())
            fail(where + ".content", "must be a non-empty string" + got(content));
        for (const char* key : {"single_word", "lstrip", "rstrip"})
            if (flag(a, where, key, false))
                fail(where + "." + key,
                     "must be false (headwise matches added tokens exactly), got true");
        BpeAddedToken t;
        t.content = content.get<std::string>();
        t.id = id.get<std::int64_t>();
        t.special = flag(a, where, "special", false);
        auto& slot = tokens[static_cast<std::size_t>(t.id)];
        if (!slot) slot = t.content;
        c.added.push_back(std::move(t));
    }
    c.tokens.reserve(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (!tokens[i])
            fail("model.vocab",
                 "has no token of id " + std::to_string(i) + " (ids must be dense from 0)");
        c.tokens.push_back(std::move(*tokens[i]));
    }
    if (unk.is_string()) {
        const auto it = std::find(c.tokens.begin(), c.tokens.end(), unk.get<std::string>());
        if (it == c.tokens.end())
            fail("model.unk_token", "must be a token of the vocabulary" + got(unk));
        c.unk_id = it - c.tokens.begin();
    }
    // normalizer, pre_tokenizer, decoder, post_processor
    if (const nlohmann::json& norm = field(j, "normalizer"); !norm.is_null())
        fail("normalizer",
             "must be null (headwise implements no normalizer for BPE)" + got(field(norm, "type")));
    const char* supported =
        "; headwise implements ByteLevel and Sequence[Digits(individual_digits: true), ByteLevel]";
    auto byte_level = [&](const nlohmann::json& p, const std::string& where) {
        c.add_prefix_space = flag(p, where, "add_prefix_space", false);
        if (!flag(p, where, "use_regex", true))
            fail(where + ".use_regex", "must be true (GPT-2's split), got false");
    };
    const nlohmann::json& pre = field(j, "pre_tokenizer");
    const nlohmann::json& pre_type = field(pre, "type");
    if (pre.is_object() && pre_type == "ByteLevel") {
        byte_level(pre, "pre_tokenizer");
    } else if (pre.is_object() && pre_type == "Sequence") {
        const nlohmann::json& seq = field(pre, "pretokenizers");
        const bool ok = seq.is_array() && seq.size() == 2 && seq[0].is_object() &&
                        seq[1].is_object() && field(seq[0], "type") == "Digits" &&
                        field(seq[0], "individual_digits") == true &&
                        field(seq[1], "type") == "ByteLevel";
        if (!ok) fail("pre_tokenizer", std::string("is a Sequence of another kind") + supported);
        byte_level(seq[1], "pre_tokenizer.pretokenizers[1]");
        c.pre_tokenizer = BpePreTokenizer::digits_byte_level;
    } else {
        fail("pre_tokenizer",
             "is " +
                 (pre.is_object() ? detail::describe_json(pre_type) : detail::describe_json(pre)) +
                 supported);
    }
    const nlohmann::json& dec = field(j, "decoder");
    if (!dec.is_null() && field(dec, "type") != "ByteLevel")
        fail("decoder", "must be ByteLevel or null, got " +
                            detail::describe_json(dec.is_object() ? field(dec, "type") : dec));
    const nlohmann::json& post = field(j, "post_processor");
    const nlohmann::json& post_type = field(post, "type");
    if (post.is_object() && post_type == "TemplateProcessing") {
        // Only a BOS: single = [{"SpecialToken": {"id": X}}, {"Sequence": {"id": "A"}}].
        const nlohmann::json& single = field(post, "single");
        const bool plain =
            single.is_array() && single.size() == 1 && single[0].contains("Sequence");
        const bool bos = single.is_array() && single.size() == 2 && single[0].is_object() &&
                         single[0].contains("SpecialToken") && single[1].is_object() &&
                         single[1].contains("Sequence");
        if (!plain && !bos)
            fail("post_processor.single", "must be $A or one special token then $A" + got(single));
        if (bos) {
            const nlohmann::json& tid = field(single[0]["SpecialToken"], "id");
            const auto it = tid.is_string() ? std::find(c.tokens.begin(), c.tokens.end(),
                                                        tid.get<std::string>())
                                            : c.tokens.end();
            if (it == c.tokens.end())
                fail("post_processor.single[0].SpecialToken.id",
                     "must be a token of the vocabulary" + got(tid));
            c.bos_id = it - c.tokens.begin();
            c.add_bos = true;
        }
    } else if (!post.is_null() && post_type != "ByteLevel") {
        fail("post_processor", "must be ByteLevel, TemplateProcessing or null, got " +
                                   detail::describe_json(post.is_object() ? post_type : post));
    }
    try {
        return BpeTokenizer(std::move(c));
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(std::string(fn) + ": " + name + ": " + e.what());
    }
}

// ---- GGUF -----------------------------------------------------------------------------------

inline BpeTokenizer BpeTokenizer::from_gguf(const io::GgufFile& file) {
    constexpr const char* fn = "headwise::text::BpeTokenizer::from_gguf";
    auto fail = [&](const std::string& key, const std::string& what) -> void {
        throw std::runtime_error(std::string(fn) + ": " + file.name() + ": '" + key + "' " + what);
    };
    auto type_of = [](const io::GgufValue& v) {
        std::string t = io::gguf_value_type_name(v.type());
        if (v.is_array()) t += " of " + std::string(io::gguf_value_type_name(v.element_type()));
        return t;
    };
    auto string_of = [&](const std::string& key) -> std::optional<std::string> {
        const io::GgufValue* v = file.find(key);
        if (!v) return std::nullopt;
        if (v->type() != io::GgufValueType::string)
            fail(key, "must be a STRING, got " + type_of(*v));
        return v->as_string();
    };
    auto strings_of = [&](const std::string& key) {
        const io::GgufValue* v = file.find(key);
        if (!v) fail(key, "is missing");
        if (!v->is_array() || v->element_type() != io::GgufValueType::string)
            fail(key, "must be an ARRAY of STRING, got " + type_of(*v));
        return v->to_vector<std::string>();
    };
    auto id_of = [&](const std::string& key) -> std::optional<std::int64_t> {
        const io::GgufValue* v = file.find(key);
        if (!v) return std::nullopt;
        if (v->is_array() || v->type() == io::GgufValueType::string ||
            v->type() == io::GgufValueType::boolean || v->type() == io::GgufValueType::float32 ||
            v->type() == io::GgufValueType::float64)
            fail(key, "must be an integer, got " + type_of(*v));
        return v->as_int();
    };
    const auto model = string_of("tokenizer.ggml.model");
    if (!model) fail("tokenizer.ggml.model", "is missing");
    if (*model != "gpt2")
        fail("tokenizer.ggml.model",
             "is " + bpe_detail::quote(*model) + "; headwise reads 'gpt2' (byte-level BPE) here");
    BpeConfig c;
    const std::string pre = string_of("tokenizer.ggml.pre").value_or("default");
    if (pre == "smollm") {
        c.pre_tokenizer = BpePreTokenizer::digits_byte_level;
    } else if (pre == "gpt-2" || pre == "gpt2" || pre == "default") {
        c.pre_tokenizer = BpePreTokenizer::byte_level;
    } else {
        fail("tokenizer.ggml.pre", "is " + bpe_detail::quote(pre) +
                                       ", which headwise does not implement; it implements "
                                       "'smollm', 'gpt-2', 'gpt2', 'default'");
    }
    c.tokens = strings_of("tokenizer.ggml.tokens");
    std::vector<std::string> merges = strings_of("tokenizer.ggml.merges");
    c.merges.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
        const std::string& s = merges[r];
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
            s.find(' ', sp + 1) != std::string::npos)
            fail("tokenizer.ggml.merges",
                 "[" + std::to_string(r) + "] must be two tokens and one space between them, got " +
                     bpe_detail::quote(s));
        c.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
    if (const io::GgufValue* v = file.find("tokenizer.ggml.token_type")) {
        if (!v->is_array() || v->element_type() != io::GgufValueType::int32)
            fail("tokenizer.ggml.token_type", "must be an ARRAY of INT32, got " + type_of(*v));
        const auto types = v->to_vector<std::int32_t>();
        if (types.size() != c.tokens.size())
            fail("tokenizer.ggml.token_type", "must have one entry per token (" +
                                                  std::to_string(c.tokens.size()) + "), got " +
                                                  std::to_string(types.size()));
        for (std::size_t i = 0; i < types.size(); ++i)
            if (types[i] == 3 || types[i] == 4)  // CONTROL, USER_DEFINED
                c.added.push_back({c.tokens[i], static_cast<std::int64_t>(i), types[i] == 3});
    }
    c.bos_id = id_of("tokenizer.ggml.bos_token_id");
    c.eos_id = id_of("tokenizer.ggml.eos_token_id");
    if (const io::GgufValue* v = file.find("tokenizer.ggml.add_bos_token")) {
        if (v->type() != io::GgufValueType::boolean)
            fail("tokenizer.ggml.add_bos_token", "must be a BOOL, got " + type_of(*v));
        c.add_bos = v->as_bool();
    }
    try {
        return BpeTokenizer(std::move(c));
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(std::string(fn) + ": " + file.name() + ": " + e.what());
    }
}

}  // namespace headwise::text
