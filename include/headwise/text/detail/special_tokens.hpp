// SPDX-License-Identifier: MIT
// The special tokens a tokenizer finds in raw text before anything else, as a byte trie.
#pragma once

#include <algorithm>    // std::lower_bound
#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int32_t, std::int64_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

namespace headwise::detail {

/// Special tokens (byte strings, each with an id) matched leftmost-longest in a text. A byte trie:
/// a match costs the length of the longest special token starting at that position, whatever
/// the number of tokens (a scan over every token at every byte made a 1,000-token vocabulary
/// tokenize 16x slower).
class SpecialTokenTrie {
public:
    /// Adds `token` with `id`; an empty token matches nowhere and is ignored. The same token
    /// added again takes the new id.
    void add(const std::string& token, std::int64_t id);
    /// The byte length of the longest token that starts at `text[i]` (i < text.size()), and its
    /// id; {0, -1} when none does.
    std::pair<std::size_t, std::int64_t> match(std::string_view text, std::size_t i) const;
    /// Whether no token was added.
    bool empty() const noexcept { return nodes_.size() == 1; }

private:
    // Node 0 is the root; a node's `id` is that of the token ending there (-1: none), its edges
    // sorted by byte. The root's edges are also in a table of all 256 bytes, since most text
    // bytes start no special token and stop there.
    struct Node {
        std::int64_t id = -1;
        std::vector<std::pair<unsigned char, std::int32_t>> next;
    };
    static auto edge(const std::vector<std::pair<unsigned char, std::int32_t>>& next,
                     unsigned char byte) {
        return std::lower_bound(next.begin(), next.end(), byte,
                                [](const auto& e, unsigned char b) { return e.first < b; });
    }

    std::vector<Node> nodes_{1};
    std::array<std::int32_t, 256> roots_{};  // the root's edges; 0: none
};

inline void SpecialTokenTrie::add(const std::string& token, std::int64_t id) {
    if (token.empty()) return;
    std::size_t node = 0;
    for (const char ch : token) {
        const auto byte = static_cast<unsigned char>(ch);
        auto& next = nodes_[node].next;
        auto it = edge(next, byte);
        if (it == next.end() || it->first != byte) {
            const auto child = static_cast<std::int32_t>(nodes_.size());
            next.insert(it, {byte, child});
            if (node == 0) roots_[byte] = child;
            nodes_.emplace_back();  // invalidates `next` and `it`, used no more
            node = static_cast<std::size_t>(child);
        } else {
            node = static_cast<std::size_t>(it->second);
        }
    }
    nodes_[node].id = id;
}

inline std::pair<std::size_t, std::int64_t> SpecialTokenTrie::match(std::string_view text,
                                                                    std::size_t i) const {
    std::pair<std::size_t, std::int64_t> best{0, -1};
    std::int32_t node = roots_[static_cast<unsigned char>(text[i])];
    for (std::size_t k = i + 1; node != 0; ++k) {
        const Node& n = nodes_[static_cast<std::size_t>(node)];
        if (n.id >= 0) best = {k - i, n.id};
        if (k == text.size()) break;
        const auto byte = static_cast<unsigned char>(text[k]);
        const auto it = edge(n.next, byte);
        node = it != n.next.end() && it->first == byte ? it->second : 0;
    }
    return best;
}

}  // namespace headwise::detail
