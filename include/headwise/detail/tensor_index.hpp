// SPDX-License-Identifier: MIT
// Multi-indices of a tensor: range checks, row-major offsets and their error messages.
#pragma once

#include <stdexcept>    // std::out_of_range
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_integral_v

#include "../config.hpp"
#include "../shape.hpp"
#include "assert.hpp"

namespace headwise::detail {

template <class... I>
inline constexpr bool all_integral_v = (std::is_integral_v<I> && ...);

/// Whether `count` indices address an element of `shape`: one index per axis, each in
/// [0, extent).
inline bool index_in_range(const Shape& shape, const Index* index, int count) noexcept {
    if (count != shape.rank()) return false;
    for (int a = 0; a < count; ++a)
        if (index[a] < 0 || index[a] >= shape[a]) return false;
    return true;
}

/// What is wrong with a multi-index that index_in_range rejects, for `function`'s message: the
/// count of indices against the rank, or the first index out of range, with the shape.
inline std::string index_error(const char* function, const Shape& shape, const Index* index,
                               int count) {
    const std::string head = std::string(function) + ": ";
    if (count != shape.rank())
        return head + std::to_string(count) + (count == 1 ? " index" : " indices") +
               " for a tensor of rank " + std::to_string(shape.rank()) + " (shape " + shape.str() +
               ")";
    for (int a = 0; a < count; ++a)
        if (index[a] < 0 || index[a] >= shape[a])
            return head + "index " + std::to_string(index[a]) + " of dimension " +
                   std::to_string(a) + " is out of range for shape " + shape.str();
    return head + "index in range";  // not reached for a rejected index
}

/// Row-major offset of a multi-index. Unchecked under NDEBUG, as std::vector::operator[]; in
/// debug builds an index out of range stops the program with a message naming the index and
/// the shape.
template <class... I>
Index offset_of(const char* function, const Shape& shape, I... idx) {
    constexpr int count = static_cast<int>(sizeof...(I));
    const Index index[sizeof...(I) + 1] = {static_cast<Index>(idx)..., 0};  // +1: rank 0 too
#ifndef NDEBUG
    if (!index_in_range(shape, index, count))
        assert_fail(index_error(function, shape, index, count).c_str(), __FILE__, __LINE__);
#else
    static_cast<void>(function);
#endif
    Index off = 0;
    for (int a = 0; a < count; ++a) off = off * shape[a] + index[a];
    return off;
}

/// Row-major offset of a multi-index, checked in every build: throws std::out_of_range naming
/// the index and the shape (or the count of indices and the rank).
template <class... I>
Index checked_offset_of(const char* function, const Shape& shape, I... idx) {
    constexpr int count = static_cast<int>(sizeof...(I));
    const Index index[sizeof...(I) + 1] = {static_cast<Index>(idx)..., 0};  // +1: rank 0 too
    if (!index_in_range(shape, index, count))
        throw std::out_of_range(index_error(function, shape, index, count));
    Index off = 0;
    for (int a = 0; a < count; ++a) off = off * shape[a] + index[a];
    return off;
}

/// The row-major multi-index of flat index `flat` in `shape`: "[0, 2, 1]" ("[]" for rank 0).
inline std::string index_string(const Shape& shape, Index flat) {
    Index index[Shape::kMaxRank] = {};
    for (int a = shape.rank() - 1; a >= 0; --a) {
        const Index n = shape[a];
        index[a] = n == 0 ? 0 : flat % n;
        flat = n == 0 ? 0 : flat / n;
    }
    std::string s = "[";
    for (int a = 0; a < shape.rank(); ++a) {
        if (a) s += ", ";
        s += std::to_string(index[a]);
    }
    return s + "]";
}

}  // namespace headwise::detail
