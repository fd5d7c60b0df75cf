// SPDX-License-Identifier: MIT
// Whether every rank holds the same values: a byte hash and one all-reduce (DataParallel's checks).
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <vector>   // std::vector

#include "../communicator.hpp"

namespace headwise::distributed::detail {

/// FNV-1a, 64 bits: a hash of bytes, the same on every rank for the same bytes.
inline std::uint64_t fnv1a(const void* data, std::size_t n,
                           std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
inline std::uint64_t fnv1a_word(std::uint64_t word, std::uint64_t h) noexcept {
    return fnv1a(&word, sizeof word, h);
}

/// The collective test that `x` is the same on every rank: one all-reduce of (x, ~x) with MPI_MAX
/// gives the largest and (complemented) the smallest over ranks.
struct Spread {
    std::uint64_t lo, hi;
    bool equal() const noexcept { return lo == hi; }
};
inline std::vector<Spread> spread(const Communicator& comm, const std::vector<std::uint64_t>& xs) {
    std::vector<std::uint64_t> words;
    for (std::uint64_t x : xs) {
        words.push_back(x);
        words.push_back(~x);
    }
    comm.max(words.data(), words.size());
    std::vector<Spread> out;
    for (std::size_t i = 0; i < xs.size(); ++i) out.push_back({~words[2 * i + 1], words[2 * i]});
    return out;
}

}  // namespace headwise::distributed::detail
