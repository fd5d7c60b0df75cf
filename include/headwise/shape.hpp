// SPDX-License-Identifier: MIT
// Shape: the extents of a tensor, up to kMaxRank dimensions, stored inline (no allocation).
#pragma once

#include <algorithm>         // std::copy, std::equal
#include <array>             // std::array
#include <cstddef>           // std::size_t
#include <initializer_list>  // std::initializer_list
#include <ostream>           // std::ostream
#include <stdexcept>         // std::invalid_argument, std::length_error
#include <string>            // std::string, std::to_string
#include <vector>            // std::vector

#include "config.hpp"

namespace headwise {

/// The extents of a row-major tensor, outermost first: `Shape{B, L, E}`.
class Shape {
public:
    static constexpr int kMaxRank = 8;

    Shape() = default;
    Shape(std::initializer_list<Index> dims) { assign(dims.begin(), dims.end()); }
    explicit Shape(const std::vector<Index>& dims) { assign(dims.begin(), dims.end()); }

    int rank() const noexcept { return rank_; }
    /// Extent of axis `axis`, 0 <= axis < rank() (see normalize_axis for negative axes).
    Index operator[](int axis) const noexcept {
        HEADWISE_ASSERT(axis >= 0 && axis < rank_);
        return dims_[slot(axis)];
    }
    Index& operator[](int axis) noexcept {
        HEADWISE_ASSERT(axis >= 0 && axis < rank_);
        return dims_[slot(axis)];
    }
    /// Extent of the last axis (the contiguous one); 1 for rank 0.
    Index back() const noexcept {
        return rank_ == 0 ? 1 : dims_[static_cast<std::size_t>(rank_ - 1)];
    }
    /// Product of all extents; 1 for rank 0 (a scalar). Throws std::length_error naming the
    /// shape when the product of its nonzero extents does not fit in Index (which a shape built
    /// by a constructor never does, but one changed through operator[] may).
    Index numel() const {
        Index n = 1;
        if (!checked_product(n)) throw std::length_error(overflow_message("numel"));
        return n;
    }
    const Index* begin() const noexcept { return dims_.data(); }
    const Index* end() const noexcept { return dims_.data() + rank_; }
    /// The shape without its first `count` axes: [B, L, E].drop_front() == [L, E].
    Shape drop_front(int count = 1) const noexcept {
        Shape r;
        const int n = count < rank_ ? count : rank_;
        for (int i = n; i < rank_; ++i)
            r.dims_[static_cast<std::size_t>(i - n)] = dims_[static_cast<std::size_t>(i)];
        r.rank_ = rank_ - n;
        return r;
    }
    std::vector<Index> to_vector() const { return std::vector<Index>(begin(), end()); }

    /// Axis `axis` counted from the back when negative (-1 is the last axis).
    int normalize_axis(int axis) const noexcept { return axis < 0 ? axis + rank_ : axis; }

    /// "[8, 128, 512]"
    std::string str() const {
        std::string s = "[";
        for (int i = 0; i < rank_; ++i) {
            if (i) s += ", ";
            s += std::to_string(dims_[static_cast<std::size_t>(i)]);
        }
        return s + "]";
    }

    friend bool operator==(const Shape& a, const Shape& b) noexcept {
        return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
    }
    friend bool operator!=(const Shape& a, const Shape& b) noexcept { return !(a == b); }
    friend std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

private:
    static_assert((kMaxRank & (kMaxRank - 1)) == 0,
                  "headwise::Shape: kMaxRank must be a power of two (slot() masks with it)");
    // The mask keeps every index in bounds, so GCC at -O2 cannot see one that is not and warn
    // -Warray-bounds (size(-2) inlined where it cannot prove the rank); valid axes are unchanged.
    static std::size_t slot(int axis) noexcept {
        return static_cast<std::size_t>(axis) & static_cast<std::size_t>(kMaxRank - 1);
    }

    /// Sets `n` to the product of the extents; false when the product of the nonzero extents
    /// (and so any partial product, however the extents are grouped) overflows Index.
    bool checked_product(Index& n) const noexcept {
        Index nonzero = 1;
        bool zero = false;
        for (int i = 0; i < rank_; ++i) {
            const Index d = dims_[static_cast<std::size_t>(i)];
            if (d == 0) {
                zero = true;
            } else if (__builtin_mul_overflow(nonzero, d, &nonzero)) {
                return false;
            }
        }
        n = zero ? 0 : nonzero;
        return true;
    }
    std::string overflow_message(const char* function) const {
        return std::string("headwise::Shape::") + function + ": shape " + str() +
               " has more elements than an Index (" + std::to_string(sizeof(Index) * 8) +
               "-bit signed) can count";
    }

    template <class It>
    void assign(It first, It last) {
        const auto n = static_cast<int>(last - first);
        if (n > kMaxRank)
            throw std::invalid_argument("headwise::Shape: rank " + std::to_string(n) +
                                        " exceeds the maximum rank " + std::to_string(kMaxRank));
        for (It it = first; it != last; ++it)
            if (*it < 0)
                throw std::invalid_argument("headwise::Shape: negative extent " +
                                            std::to_string(*it));
        std::copy(first, last, dims_.begin());
        rank_ = n;
        Index count = 0;
        if (!checked_product(count)) throw std::length_error(overflow_message("Shape"));
    }

    std::array<Index, kMaxRank> dims_{};
    int rank_ = 0;
};

}  // namespace headwise
