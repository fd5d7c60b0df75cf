// SPDX-License-Identifier: MIT
// KVCache<T>: the keys and values of the tokens a MultiheadAttention has decoded so far.
#pragma once

#include <cstddef>  // std::size_t
#include <string>   // std::to_string

#include "../../config.hpp"
#include "../../detail/scratch_buffer.hpp"
#include "../../error.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"

namespace headwise {

template <class T>
class MultiheadAttention;

/// The projected keys and values of every token decoded so far, per key/value head, for a batch
/// of B sequences, with room for `capacity` tokens: [B, Hkv, capacity, D] each, so that a
/// grouped-query module's cache is Hkv / H the size of a full one. Made by
/// MultiheadAttention::make_kv_cache(batch, capacity), filled by decode(); all its memory is
/// allocated when it is made (decode's scratch on the first decode call), so steps allocate
/// nothing. A cache belongs to one sequence batch: one module may serve several caches (a cache
/// holds all the per-sequence state), but one cache must not be used by two calls at once.
///
/// Key padding: decode(x_new, cache, key_padding) marks new tokens as padding ([B, T], true =
/// padding); no later token ever attends a padding token. A batch of prompts of different
/// lengths is fed left-padded to a common length with its padding marked, then decoded one token
/// per step for every sequence; each sequence then sees only its own tokens.
template <class T>
class KVCache {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    /// An empty cache of capacity 0 (make_kv_cache makes usable ones).
    KVCache() = default;

    Index batch() const noexcept { return B_; }
    Index capacity() const noexcept { return capacity_; }
    /// Tokens held so far (per sequence).
    Index size() const noexcept { return size_; }
    Index num_kv_heads() const noexcept { return Hkv_; }
    Index head_dim() const noexcept { return D_; }

    /// Forgets every token; the memory stays allocated.
    void clear() noexcept { size_ = 0; }
    /// Keeps the first n tokens and forgets the others (to retry from an earlier position).
    void truncate(Index n) {
        if (n < 0 || n > size_)
            throw_invalid_argument("headwise::KVCache::truncate", "n",
                                   "must be in [0, size() = " + std::to_string(size_) + "]",
                                   std::to_string(n));
        size_ = n;
    }

    /// Bytes of the cached keys and values: 2 B Hkv capacity D sizeof(T).
    std::size_t memory_bytes() const noexcept {
        return static_cast<std::size_t>(k_.numel() + v_.numel()) * sizeof(T);
    }

    /// The keys and values, [B, Hkv, capacity, D]: tokens [0, size()) of each (b, head) are
    /// valid, the rest unspecified.
    TensorView<const T> keys() const noexcept { return k_.view(); }
    TensorView<const T> values() const noexcept { return v_.view(); }
    /// Which cached tokens are padding, [B, capacity] (valid for tokens [0, size())).
    TensorView<const bool> padding() const noexcept { return padding_.view(); }

private:
    friend class MultiheadAttention<T>;
    KVCache(Index batch, Index capacity, Index E, Index kv_heads, Index head_dim)
        : B_(batch), capacity_(capacity), E_(E), Hkv_(kv_heads), D_(head_dim) {
        k_ = Tensor<T>(Shape{B_, Hkv_, capacity_, D_});
        v_ = Tensor<T>(k_.shape());
        padding_ = Tensor<bool>(Shape{B_, capacity_});
    }

    /// Head g's [capacity, D] block of batch b in the keys (or values).
    MatrixMap<T> k(Index b, Index g) noexcept {
        return MatrixMap<T>(k_.data() + (b * Hkv_ + g) * capacity_ * D_, capacity_, D_);
    }
    MatrixMap<T> v(Index b, Index g) noexcept {
        return MatrixMap<T>(v_.data() + (b * Hkv_ + g) * capacity_ * D_, capacity_, D_);
    }

    Index B_ = 0, capacity_ = 0, E_ = 0, Hkv_ = 0, D_ = 0;
    Index size_ = 0;
    bool any_padding_ = false;  // some cached token is padding (else the mask is skipped)
    Tensor<T> k_, v_;           // [B, Hkv, capacity, D]
    Tensor<bool> padding_;      // [B, capacity], true = padding
    // decode's scratch, sized on first use and grown only when a larger chunk comes:
    detail::ScratchBuffer<T> qkv_;      // [B T, E + 2 Hkv D]: the new tokens' projections
    detail::ScratchBuffer<T> ctx_;      // [B T, E]: Concat(head_1, ..., head_H)
    detail::ScratchBuffer<T> p_;        // [threads, rows, capacity + 2]: probabilities
    detail::ScratchBuffer<T> kx_, vx_;  // [threads, capacity + 2, D]: with bias_k / zero key
};

}  // namespace headwise
