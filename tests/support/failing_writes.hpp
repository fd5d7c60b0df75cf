// SPDX-License-Identifier: MIT
// Test helpers for the atomic saves: a writer that fills up part way, and a directory's listing.
#pragma once

#include <headwise/io/detail/atomic_file.hpp>

#include <algorithm>   // std::min, std::sort
#include <cerrno>      // errno, ENOSPC
#include <cstddef>     // std::size_t, std::ptrdiff_t
#include <filesystem>  // std::filesystem::path, directory_iterator
#include <string>      // std::string
#include <vector>      // std::vector

namespace headwise::test {

/// A writer standing for a device that fills up: it accepts `budget` bytes, at most `chunk` per
/// call (short writes, which the saver must continue), then fails with ENOSPC.
struct FillingDevice {
    std::size_t budget;
    std::size_t chunk = ~std::size_t{0};
    std::ptrdiff_t operator()(int fd, const void* data, std::size_t size) {
        if (budget == 0) {
            errno = ENOSPC;
            return -1;
        }
        const std::ptrdiff_t n =
            headwise::detail::SystemWrite()(fd, data, std::min({size, budget, chunk}));
        if (n > 0) budget -= static_cast<std::size_t>(n);
        return n;
    }
};

/// The names in `dir`, sorted.
inline std::vector<std::string> listing(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace headwise::test
