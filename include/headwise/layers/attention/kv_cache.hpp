// SPDX-License-Identifier: MIT
// KVCache<T>: the keys and values of the tokens a MultiheadAttention has decoded so far.
#pragma once

#include <algorithm>    // std::count, std::fill
#include <cstddef>      // std::size_t
#include <memory>       // std::shared_ptr, std::make_shared
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

#include "../../bf16.hpp"
#include "../../config.hpp"
#include "../../detail/compiled_templates.hpp"
#include "../../error.hpp"
#include "../../precision.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "detail/attention_buffers.hpp"

namespace headwise {

/// The projected keys and values of every token decoded so far, per key/value head, for a batch
/// of B sequences, with room for `capacity` tokens: [B, Hkv, capacity, D] each, so that a
/// grouped-query module's cache is Hkv / H the size of a full one. Made by
/// MultiheadAttention::make_kv_cache(batch, capacity), filled by decode() through append(); all
/// its memory is allocated when it is made (decode's scratch on the first decode call), so steps
/// allocate nothing. A cache belongs to one sequence batch: one module may serve several caches
/// (a cache holds all the per-sequence state), but one cache must not be used by two calls at
/// once.
///
/// Key padding: decode(x_new, cache, key_padding) marks new tokens as padding ([B, T], true =
/// padding); no later token ever attends a padding token. A batch of prompts of different
/// lengths is fed left-padded to a common length with its padding marked, then decoded one token
/// per step for every sequence; each sequence then sees only its own tokens.
///
/// Invariants, kept by the cache's own writes: 0 <= size() <= capacity(); keys, values and
/// padding flags are valid for tokens [0, size()); has_padding() tells whether any of those
/// tokens is padding; position(b) counts sequence b's held tokens that are not.
///
/// With rotary embeddings (MultiheadAttentionOptions::rotary) the cache holds the keys already
/// rotated, each at its token's position.
///
/// Precision::bf16 (KVCache<float> only): keys and values are stored in bf16, rounded as they
/// are appended: half the memory (memory_bytes()). Attention reads them widened to float
/// (widen_blocks); keys(), values(), key_block() and value_block() are then empty.
template <class T>
class KVCache {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    /// An empty cache of capacity 0 (make_kv_cache makes usable ones).
    KVCache() = default;
    /// Room for `capacity` tokens of `batch` sequences, `kv_heads` heads of `head_dim` features
    /// each, for a module of embed_dim `embed_dim` (MultiheadAttention::make_kv_cache passes its
    /// own dimensions). Throws std::invalid_argument unless every size is positive.
    /// `precision` Precision::bf16 stores them in bf16 (float caches only; std::invalid_argument
    /// otherwise).
    KVCache(Index batch, Index capacity, Index embed_dim, Index kv_heads, Index head_dim,
            Precision precision = Precision::float32)
        : B_(batch), capacity_(capacity), E_(embed_dim), Hkv_(kv_heads), D_(head_dim) {
        constexpr const char* fn = "headwise::KVCache::KVCache";
        const char* names[] = {"batch", "capacity", "embed_dim", "kv_heads", "head_dim"};
        const Index sizes[] = {batch, capacity, embed_dim, kv_heads, head_dim};
        for (int i = 0; i < 5; ++i)
            if (sizes[i] <= 0)
                throw_invalid_argument(fn, names[i], "must be positive", std::to_string(sizes[i]));
        if (precision != Precision::float32 && precision != Precision::bf16)
            throw_invalid_argument(fn, "precision", "Precision::float32 or Precision::bf16",
                                   std::to_string(static_cast<int>(precision)));
        if (precision == Precision::bf16 && !std::is_same_v<T, float>)
            throw_invalid_argument(fn, "precision", "Precision::float32 for a KVCache<double>",
                                   "Precision::bf16 (bf16 is for float caches)");
        bf16_ = precision == Precision::bf16;
        if (bf16_) {
            const auto n = static_cast<std::size_t>(B_ * Hkv_ * capacity_ * D_);
            kh_.assign(n, BFloat16{});
            vh_.assign(n, BFloat16{});
            k_ = Tensor<T>(Shape{B_, Hkv_, 0, D_});
            v_ = Tensor<T>(k_.shape());
        } else {
            k_ = Tensor<T>(Shape{B_, Hkv_, capacity_, D_});
            v_ = Tensor<T>(k_.shape());
        }
        padding_ = Tensor<bool>(Shape{B_, capacity_});
        real_.assign(static_cast<std::size_t>(B_), 0);
    }

    Index batch() const noexcept { return B_; }
    Index capacity() const noexcept { return capacity_; }
    /// Tokens held so far (per sequence).
    Index size() const noexcept { return size_; }
    Index embed_dim() const noexcept { return E_; }
    Index num_kv_heads() const noexcept { return Hkv_; }
    Index head_dim() const noexcept { return D_; }
    /// How the keys and values are stored.
    Precision precision() const noexcept { return bf16_ ? Precision::bf16 : Precision::float32; }
    /// True when some held token is padding.
    bool has_padding() const noexcept { return any_padding_; }
    /// The position the next token of sequence b takes under rotary embeddings: how many of its
    /// held tokens are not padding (Hugging Face's cumsum(attention_mask) - 1 of that token), so
    /// that left padding shifts no position. size() for a sequence without padding.
    Index position(Index b) const noexcept { return real_[static_cast<std::size_t>(b)]; }

    /// Forgets every token; the memory stays allocated.
    void clear() noexcept {
        size_ = 0;
        any_padding_ = false;
        std::fill(real_.begin(), real_.end(), Index{0});
    }
    /// Keeps the first n tokens and forgets the others (to retry from an earlier position).
    void truncate(Index n) {
        if (n < 0 || n > size_)
            throw_invalid_argument("headwise::KVCache::truncate", "n",
                                   "must be in [0, size() = " + std::to_string(size_) + "]",
                                   std::to_string(n));
        size_ = n;
        any_padding_ = false;
        for (Index b = 0; b < B_; ++b) {
            const bool* flags = padding_.data() + b * capacity_;
            const auto pads = std::count(flags, flags + n, true);
            real_[static_cast<std::size_t>(b)] = n - static_cast<Index>(pads);
            any_padding_ = any_padding_ || pads > 0;
        }
    }

    /// Appends `tokens` tokens to every sequence: `keys(b, h)` and `values(b, h)` give the new
    /// [tokens, D] keys and values of sequence b, key/value head h; `padding` marks which new
    /// tokens are padding ([B, tokens], or [tokens] with batch 1; absent: none). Throws
    /// std::invalid_argument, before anything changes, when they do not fit.
    template <class KeyBlocks, class ValueBlocks>
    void append(Index tokens, KeyBlocks&& keys, ValueBlocks&& values,
                TensorView<const bool> padding = {}) {
        constexpr const char* fn = "headwise::KVCache::append";
        if (tokens < 0 || tokens > capacity_ - size_)
            throw_invalid_argument(fn, "tokens",
                                   "must fit the cache, which holds " + std::to_string(size_) +
                                       " of capacity " + std::to_string(capacity_),
                                   std::to_string(tokens));
        const bool padded = padding.data() != nullptr;
        if (padded && padding.numel() != B_ * tokens)
            throw shape_error(fn, "padding", Shape{B_, tokens}.str(), padding.shape());
        for (Index b = 0; b < B_; ++b) {
            for (Index h = 0; h < Hkv_; ++h) {
                if (bf16_) {  // rounded to bf16 once, here
                    store_bf16(kh_, b, h, keys(b, h), tokens);
                    store_bf16(vh_, b, h, values(b, h), tokens);
                    continue;
                }
                block(k_, b, h).middleRows(size_, tokens) = keys(b, h);
                block(v_, b, h).middleRows(size_, tokens) = values(b, h);
            }
            for (Index t = 0; t < tokens; ++t) {
                const bool pad = padded && padding.data()[b * tokens + t];
                padding_.data()[b * capacity_ + size_ + t] = pad;
                any_padding_ = any_padding_ || pad;
                if (!pad) ++real_[static_cast<std::size_t>(b)];
            }
        }
        size_ += tokens;
    }

    /// bf16 caches: the held keys and values of sequence b, key/value head h widened to float
    /// into K [size(), D] and V [size(), D] (rows D apart).
    void widen_blocks(Index b, Index h, T* K, T* V) const noexcept {
        if constexpr (std::is_same_v<T, float>) {
            const std::size_t first = static_cast<std::size_t>((b * Hkv_ + h) * capacity_ * D_);
            to_float(kh_.data() + first, K, size_ * D_);
            to_float(vh_.data() + first, V, size_ * D_);
        } else {
            static_cast<void>(b);
            static_cast<void>(h);
            static_cast<void>(K);
            static_cast<void>(V);
        }
    }

    /// The held keys and values of sequence b, key/value head h: [size(), D] (float caches;
    /// [0, D] for a bf16 one).
    MatrixMap<const T> key_block(Index b, Index h) const noexcept {
        if (bf16_) return MatrixMap<const T>(k_.data(), 0, D_);
        return MatrixMap<const T>(k_.data() + (b * Hkv_ + h) * capacity_ * D_, size_, D_);
    }
    MatrixMap<const T> value_block(Index b, Index h) const noexcept {
        if (bf16_) return MatrixMap<const T>(v_.data(), 0, D_);
        return MatrixMap<const T>(v_.data() + (b * Hkv_ + h) * capacity_ * D_, size_, D_);
    }
    /// Sequence b's padding flags [capacity] (valid for tokens [0, size())), or null when no held
    /// token is padding, so that attention skips the mask.
    const bool* key_padding(Index b) const noexcept {
        return any_padding_ ? padding_.data() + b * capacity_ : nullptr;
    }

    /// Bytes of the cached keys and values: 2 B Hkv capacity D sizeof(T), or 2 bytes per
    /// element in bf16.
    std::size_t memory_bytes() const noexcept {
        if (bf16_) return (kh_.size() + vh_.size()) * sizeof(BFloat16);
        return static_cast<std::size_t>(k_.numel() + v_.numel()) * sizeof(T);
    }

    /// The keys and values, [B, Hkv, capacity, D]: tokens [0, size()) of each (b, head) are
    /// valid, the rest unspecified.
    TensorView<const T> keys() const noexcept { return k_.view(); }
    TensorView<const T> values() const noexcept { return v_.view(); }
    /// Which cached tokens are padding, [B, capacity] (valid for tokens [0, size())).
    TensorView<const bool> padding() const noexcept { return padding_.view(); }

    /// Decode's scratch for this cache's batch (MultiheadAttention::decode's, not for users):
    /// held here so that one module may decode several caches.
    detail::DecodeBuffers<T>& decode_buffers() {
        if (!scratch_.buffers) scratch_.buffers = std::make_shared<detail::DecodeBuffers<T>>();
        return *scratch_.buffers;
    }
    /// Makes this cache's decode scratch `other`'s: for caches that are never decoded at the
    /// same time, such as the caches of one model's layers (LlamaModel::make_cache), which run
    /// one after the other. The scratch (the new tokens' projections, probabilities, context)
    /// is sized by the largest chunk decoded into any of them, so sharing keeps one copy
    /// instead of one per cache: a 512-token prefill of a 30-layer model held 30 of them.
    /// A copy of a cache gets a scratch of its own again.
    void share_decode_buffers(KVCache& other) {
        other.decode_buffers();
        scratch_.buffers = other.scratch_.buffers;
    }
    /// Whether this cache decodes in `other`'s scratch (share_decode_buffers).
    bool shares_decode_buffers(const KVCache& other) const noexcept {
        return scratch_.buffers != nullptr && scratch_.buffers == other.scratch_.buffers;
    }

private:
    /// Head h's [capacity, D] block of batch b in the keys (or values).
    MatrixMap<T> block(Tensor<T>& t, Index b, Index h) noexcept {
        return MatrixMap<T>(t.data() + (b * Hkv_ + h) * capacity_ * D_, capacity_, D_);
    }

    /// Rows [size(), size() + tokens) of head h's block of batch b in kh_ (or vh_), from the
    /// new [tokens, D] rows X, rounded to bf16.
    template <class Rows>
    void store_bf16(std::vector<BFloat16>& dst, Index b, Index h, const Rows& X, Index tokens) {
        if constexpr (std::is_same_v<T, float>) {
            BFloat16* out = dst.data() + ((b * Hkv_ + h) * capacity_ + size_) * D_;
            for (Index t = 0; t < tokens; ++t) to_bf16(&X(t, 0), out + t * D_, D_);
        } else {
            static_cast<void>(dst);
            static_cast<void>(b);
            static_cast<void>(h);
            static_cast<void>(X);
            static_cast<void>(tokens);
        }
    }

    Index B_ = 0, capacity_ = 0, E_ = 0, Hkv_ = 0, D_ = 0;
    Index size_ = 0;
    bool any_padding_ = false;       // some held token is padding (else the mask is skipped)
    bool bf16_ = false;              // keys and values in kh_, vh_ instead of k_, v_
    Tensor<T> k_, v_;                // [B, Hkv, capacity, D]; [B, Hkv, 0, D] in bf16
    std::vector<BFloat16> kh_, vh_;  // [B, Hkv, capacity, D] in bf16, else empty
    Tensor<bool> padding_;           // [B, capacity], true = padding
    std::vector<Index> real_;        // [B]: held tokens of each sequence that are not padding
    /// Decode's scratch: none until the first decode; shared with other caches only through
    /// share_decode_buffers. A copy starts without one, so that copies of a cache never share.
    struct Scratch {
        std::shared_ptr<detail::DecodeBuffers<T>> buffers;
        Scratch() = default;
        Scratch(const Scratch&) noexcept {}
        Scratch& operator=(const Scratch&) noexcept {
            buffers.reset();
            return *this;
        }
        Scratch(Scratch&&) noexcept = default;
        Scratch& operator=(Scratch&&) noexcept = default;
        ~Scratch() = default;
    };
    Scratch scratch_;
};

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_KV_CACHE_TEMPLATES(C, F, T) C(class, KVCache<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_KV_CACHE_TEMPLATES);
