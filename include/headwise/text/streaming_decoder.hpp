// SPDX-License-Identifier: MIT
// StreamingDecoder: token ids in one at a time, text out as soon as it is whole UTF-8 characters
// (what a program prints while a model generates).
#pragma once

#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <string>       // std::string
#include <string_view>  // std::string_view

#include "bpe.hpp"

namespace headwise::text {

/// Decodes a stream of token ids into text piece by piece. A token may end in the middle of a
/// UTF-8 character (byte-level BPE splits characters across tokens): push() returns only the
/// text whose characters are complete and holds back the bytes of a character still open;
/// finish() returns what is held, an incomplete character becoming U+FFFD. The concatenation of
/// every push() and finish() is decode(all ids, skip_special) exactly, invalid bytes included
/// (each maximal subpart of an invalid sequence one U+FFFD, as BpeTokenizer::decode has it).
class StreamingDecoder {
public:
    /// Keeps a reference to `tokenizer`, which must outlive the decoder. With skip_special, the
    /// special tokens (BOS, EOS, the end of turn) give no text.
    explicit StreamingDecoder(const BpeTokenizer& tokenizer, bool skip_special = false)
        : tokenizer_(&tokenizer), skip_special_(skip_special) {}

    /// The text completed by `id` (possibly empty). Throws std::out_of_range for an id outside
    /// [0, vocab_size()), with nothing held changed.
    std::string push(std::int64_t id);
    /// The bytes still held, as text (an incomplete character at the end is U+FFFD); the decoder
    /// is empty afterwards and may be reused.
    std::string finish();
    /// The number of bytes held back (0 when the text so far ends on a character boundary).
    std::size_t pending() const noexcept { return held_.size(); }

private:
    const BpeTokenizer* tokenizer_;
    bool skip_special_;
    std::string held_;
};

/// The length of the longest prefix of `bytes` that decodes the same now as after any further
/// bytes: everything but a last, still valid but unfinished UTF-8 sequence (a lead byte and the
/// continuation bytes that fit it so far).
std::size_t utf8_settled_prefix(std::string_view bytes) noexcept;

// ---- definitions ----------------------------------------------------------------------------

inline std::size_t utf8_settled_prefix(std::string_view bytes) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = bytes.size();
    // Only the last three bytes can start an unfinished sequence (the longest has four bytes);
    // a lead byte there whose continuation bytes so far fit it, running into the end, is held.
    const std::size_t from = n > 3 ? n - 3 : 0;
    for (std::size_t i = from; i < n; ++i) {
        const unsigned char b = p[i];
        std::size_t need = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode 15, Table 3-7)
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
        } else {
            continue;
        }
        if (i + need < n) continue;  // the whole sequence is there: settled either way
        bool fits = true;
        for (std::size_t k = 1; i + k < n; ++k) {
            const unsigned char c = p[i + k];
            if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) fits = false;
        }
        if (fits) return i;
    }
    return n;
}

inline std::string StreamingDecoder::push(std::int64_t id) {
    // token_bytes checks the id before anything is held.
    const bool skip = skip_special_ && tokenizer_->is_special(id);
    if (!skip) held_ += tokenizer_->token_bytes(id);
    const std::size_t settled = utf8_settled_prefix(held_);
    std::string out;
    if (settled == 0) return out;
    out.reserve(settled);
    bpe_detail::append_utf8_lossy(std::string_view(held_).substr(0, settled), out);
    held_.erase(0, settled);
    return out;
}

inline std::string StreamingDecoder::finish() {
    std::string out;
    bpe_detail::append_utf8_lossy(held_, out);
    held_.clear();
    return out;
}

}  // namespace headwise::text
