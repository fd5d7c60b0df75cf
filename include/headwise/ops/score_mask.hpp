// SPDX-License-Identifier: MIT
// Which attention scores of one [L, S] slice are hidden: masks, the causal rule and its alignment.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <algorithm>  // std::min, std::max
#include <cmath>      // std::isnan
#include <limits>     // std::numeric_limits
#include <string>     // std::to_string

#include "../config.hpp"
#include "../error.hpp"
#include "../tensor.hpp"

namespace headwise {

/// How a causal mask lines L queries up with S keys.
enum class CausalAlignment {
    /// Query i may attend key j when j <= i (PyTorch's is_causal): the first query sees the
    /// first key.
    top_left,
    /// Query i may attend key j when j <= i + S - L: the last query sees the last key. The rule
    /// for a chunk of L new tokens that follows S - L earlier ones (incremental decoding).
    bottom_right,
};

inline const char* to_string(CausalAlignment a) noexcept {
    switch (a) {
        case CausalAlignment::top_left:
            return "top_left";
        case CausalAlignment::bottom_right:
            return "bottom_right";
    }
    return "unknown";
}

}  // namespace headwise

namespace headwise::ops {

/// The causal rule's offset for L queries over S keys: query i may attend key j when
/// j <= i + causal_offset(alignment, L, S). Top-left 0, bottom-right S - L (negative when there
/// are more queries than keys: the first L - S queries then see no key at all).
inline Index causal_offset(CausalAlignment alignment, Index L, Index S) noexcept {
    return alignment == CausalAlignment::bottom_right ? S - L : 0;
}

/// Which scores of one [L, S] slice are hidden, and what is added to them. Every field is
/// optional. Boolean masks use one polarity throughout headwise: `true` means *may not attend*.
/// Keys at column `masked_keys` and beyond (the bias_k and zero-attention keys MultiheadAttention
/// appends) are never masked, as in PyTorch, which pads its masks with visible columns for them.
/// Every kernel reads the causal rule through causal_end(), so that it is stated once.
template <class T>
struct ScoreMask {
    const bool* mask = nullptr;         // [L, mask_ld] row-major, true = may not attend
    Index mask_ld = 0;                  // row stride of mask
    const T* bias = nullptr;            // [L, bias_ld] additive, row-major
    Index bias_ld = 0;                  // row stride of bias
    const bool* key_padding = nullptr;  // [masked_keys], true = padding (may not attend)
    bool causal = false;                // query i may attend key j only if j <= i + causal_offset
    Index causal_offset = 0;            // 0 top-left; S - L bottom-right (see causal_offset())
    Index masked_keys = -1;             // columns the masks cover; -1 means all

    bool any() const noexcept { return mask || bias || key_padding || causal; }

    /// Columns the masks cover in a slice of S keys.
    Index covered(Index S) const noexcept { return masked_keys < 0 ? S : masked_keys; }

    /// One past the last key query row i may attend under the causal rule, within the covered
    /// columns: keys [causal_end(i, S), covered(S)) are hidden, keys before it are not (by the
    /// causal rule). Non-decreasing in i, so a kernel working on blocks of rows and keys can
    /// skip a block whose first key is at or past causal_end of its last row.
    Index causal_end(Index i, Index S) const noexcept {
        const Index n = covered(S);
        if (!causal) return n;
        return std::min(n, std::max<Index>(0, i + causal_offset + 1));
    }
};

}  // namespace headwise::ops

namespace headwise::detail {

/// Throws unless `mask` can describe a slice of S keys: its masked columns within [0, S] and each
/// mask's row stride at least the columns it covers. (The rows behind the pointers cannot be
/// counted; the module that builds a ScoreMask checks the masks' tensor shapes.)
template <class T>
void check_score_mask(const char* function, const ops::ScoreMask<T>& mask, Index S) {
    if (mask.masked_keys > S)
        throw_invalid_argument(function, "mask.masked_keys",
                               "must be at most the key count " + std::to_string(S),
                               std::to_string(mask.masked_keys));
    const Index n = mask.covered(S);
    if (mask.mask && mask.mask_ld < n)
        throw_invalid_argument(function, "mask.mask_ld",
                               "must be at least the masked key count " + std::to_string(n),
                               std::to_string(mask.mask_ld));
    if (mask.bias && mask.bias_ld < n)
        throw_invalid_argument(function, "mask.bias_ld",
                               "must be at least the masked key count " + std::to_string(n),
                               std::to_string(mask.bias_ld));
}

}  // namespace headwise::detail

namespace headwise::ops {

/// Applies `mask` to raw scores in place: adds the bias and sets hidden entries to -inf, except
/// a NaN score, which stays NaN (NaN in, NaN out: a NaN in a query, a key or the bias is never
/// hidden by a mask, as in PyTorch, which masks by adding -inf). `S` may be a tile of the slice the
/// mask describes: its row r is query row `row0 + r` and its column c is key `col0 + c` (a kernel
/// working on whole slices leaves both 0).
template <class T>
void apply_score_mask(const ScoreMask<T>& mask, MatrixRef<T> S, Index row0 = 0, Index col0 = 0);

// ------------------------------------------------------------------------------------------------

template <class T>
void apply_score_mask(const ScoreMask<T>& mask, MatrixRef<T> S, Index row0, Index col0) {
    if (!mask.any()) return;
    const auto hide = [](T& s) {
        if (!std::isnan(s)) s = -std::numeric_limits<T>::infinity();
    };
    const Index keys = col0 + S.cols();  // the tile's columns are keys [col0, keys)
    // Covered columns of the tile: [0, n); appended keys past masked_keys stay visible.
    const Index n = std::max<Index>(0, std::min(keys, mask.covered(keys)) - col0);
    for (Index r = 0; r < S.rows(); ++r) {
        const Index i = row0 + r;  // query row within the slice
        T* row = S.row(r).data();
        if (mask.bias) {
            const T* b = mask.bias + i * mask.bias_ld + col0;
            for (Index j = 0; j < n; ++j) row[j] += b[j];
        }
        if (mask.mask) {
            const bool* m = mask.mask + i * mask.mask_ld + col0;
            for (Index j = 0; j < n; ++j)
                if (m[j]) hide(row[j]);
        }
        if (mask.key_padding) {
            const bool* pad = mask.key_padding + col0;
            for (Index j = 0; j < n; ++j)
                if (pad[j]) hide(row[j]);
        }
        for (Index j = std::max<Index>(0, mask.causal_end(i, keys) - col0); j < n; ++j)
            hide(row[j]);
    }
}

}  // namespace headwise::ops
