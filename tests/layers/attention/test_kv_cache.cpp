// SPDX-License-Identifier: MIT
// KV-cache decoding: any chunking of a sequence gives the outputs of one causal forward in eval
// mode (every projection, grouped-query heads, appended keys, a chosen scale, key padding); the
// cache's size and memory; errors that leave the cache as it was; no allocation per step.
//
// This file counts heap allocations: it replaces the global operator new (every headwise buffer
// comes from it; support/allocation_counter.hpp) and builds Eigen with EIGEN_RUNTIME_NO_MALLOC, so
// that an Eigen temporary inside a step would fail an assertion. Hence no
// support/instantiations.hpp here: those instantiations are compiled without that macro.
#define EIGEN_RUNTIME_NO_MALLOC
#include <headwise/headwise.hpp>

#include <algorithm>  // std::equal
#include <cstddef>    // std::size_t
#include <optional>   // std::optional
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/allocation_counter.hpp"
#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"

using namespace headwise;
using headwise::test::Tol;

namespace {

using headwise::test::kProjections;

struct DecodeConfig {
    Index H = 4, Hkv = 0;
    bool bias = true, bias_kv = false, zero_attn = false;
    std::optional<double> scale;
    RotaryEmbedding rotary;

    MultiheadAttentionOptions options(Index E, Projection p) const {
        MultiheadAttentionOptions o;
        o.embed_dim = E;
        o.num_heads = H;
        o.num_kv_heads = Hkv;
        o.projection = p;
        o.bias = bias;
        o.add_bias_kv = bias_kv;
        o.add_zero_attn = zero_attn;
        o.scale = scale;
        o.rotary = rotary;
        return o;
    }
    std::string str() const {
        return "H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) +
               " bias=" + std::to_string(bias) + " bias_kv=" + std::to_string(bias_kv) +
               " zero_attn=" + std::to_string(zero_attn) +
               " scale=" + (scale ? std::to_string(*scale) : std::string("default")) +
               " rope=" + (rotary.enabled ? to_string(rotary.convention) : "off");
    }
};

std::vector<DecodeConfig> decode_grid() {
    std::vector<DecodeConfig> g(7);
    g[1].Hkv = 2;
    g[2].Hkv = 1;
    g[3].Hkv = 2, g[3].bias_kv = true, g[3].zero_attn = true;
    g[4].bias = false, g[4].Hkv = 1;
    g[5].scale = 0.8, g[5].zero_attn = true;
    g[6].H = 8, g[6].Hkv = 2, g[6].bias_kv = true;
    return g;
}

/// Tokens [first, first + count) of x [B, N, E].
template <class T>
Tensor<T> tokens(const Tensor<T>& x, Index first, Index count) {
    const Index B = x.size(0), E = x.size(2);
    Tensor<T> out(Shape{B, count, E});
    for (Index b = 0; b < B; ++b)
        for (Index n = 0; n < count; ++n)
            for (Index e = 0; e < E; ++e) out(b, n, e) = x(b, first + n, e);
    return out;
}

/// Writes y [B, T, E] into tokens [first, first + T) of out [B, N, E].
template <class T>
void put_tokens(Tensor<T>& out, const Tensor<T>& y, Index first) {
    for (Index b = 0; b < y.size(0); ++b)
        for (Index n = 0; n < y.size(1); ++n)
            for (Index e = 0; e < y.size(2); ++e) out(b, first + n, e) = y(b, n, e);
}

/// Module with random non-zero biases, in eval mode.
template <class T>
MultiheadAttention<T> make_module(const DecodeConfig& c, Index E, Projection p) {
    MultiheadAttention<T> m(c.options(E, p), 13);
    std::mt19937_64 rng(31);
    auto sd = m.state_dict();
    for (auto& [name, t] : sd)
        if (name.find("bias") != std::string::npos) t = Tensor<T>::randn(t.shape(), rng);
    m.load_state_dict(sd);
    m.eval();
    return m;
}

/// forward(x, x, x) with is_causal, in eval mode: what decoding must reproduce.
template <class T>
Tensor<T> causal_forward(MultiheadAttention<T>& m, const Tensor<T>& x,
                         const Tensor<bool>& padding = {}) {
    AttentionMasks<T> masks;
    masks.is_causal = true;
    masks.key_padding_mask = padding;
    return m.forward(x, x, x, masks).output;
}

/// Decodes x [B, N, E] in chunks of the given sizes, returns the outputs [B, N, E].
template <class T>
Tensor<T> decode_in_chunks(MultiheadAttention<T>& m, KVCache<T>& cache, const Tensor<T>& x,
                           const std::vector<Index>& chunks, const Tensor<bool>& padding = {}) {
    Tensor<T> out(x.shape());
    Index first = cache.size();
    for (Index t : chunks) {
        const Tensor<T> y = padding.empty()
                                ? m.decode(tokens(x, first, t), cache)
                                : m.decode(tokens(x, first, t), cache,
                                           [&] {  // the chunk's columns of the [B, N] padding
                                               Tensor<bool> p(Shape{x.size(0), t});
                                               for (Index b = 0; b < x.size(0); ++b)
                                                   for (Index j = 0; j < t; ++j)
                                                       p(b, j) = padding(b, first + j);
                                               return p;
                                           }());
        put_tokens(out, y, first);
        first += t;
        CHECK(cache.size() == first);
    }
    return out;
}

}  // namespace

TEMPLATE_TEST_CASE("decoding token by token equals one causal forward", "[kv_cache]", float,
                   double) {
    using T = TestType;
    const Index B = 2, N = 7, E = 16;
    std::mt19937_64 rng(4);
    const auto x = Tensor<T>::randn(Shape{B, N, E}, rng);
    for (const DecodeConfig& c : decode_grid())
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            MultiheadAttention<T> m = make_module<T>(c, E, p);
            const Tensor<T> expected = causal_forward(m, x);
            KVCache<T> cache = m.make_kv_cache(B, N);
            const Tensor<T> y = decode_in_chunks(m, cache, x, std::vector<Index>(N, 1));
            HEADWISE_CHECK_CLOSE(y, expected, Tol<T>::rel);
        }
}

TEST_CASE("decoding in uneven chunks equals one causal forward", "[kv_cache]") {
    const Index B = 3, N = 11, E = 16;
    std::mt19937_64 rng(5);
    const auto x = Tensor<double>::randn(Shape{B, N, E}, rng);
    const std::vector<std::vector<Index>> chunkings = {
        {11}, {3, 1, 4, 2, 1}, {1, 5, 5}, {6, 1, 1, 1, 2}};
    for (const DecodeConfig& c : decode_grid())
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            MultiheadAttention<double> m = make_module<double>(c, E, p);
            const Tensor<double> expected = causal_forward(m, x);
            KVCache<double> cache = m.make_kv_cache(B, 16);  // room to spare
            for (const auto& chunks : chunkings) {
                CAPTURE(chunks);
                cache.clear();
                CHECK(cache.size() == 0);
                const Tensor<double> y = decode_in_chunks(m, cache, x, chunks);
                HEADWISE_CHECK_CLOSE(y, expected, 1e-12);
            }
        }
}

TEST_CASE("a chunk longer than one query block equals one causal forward", "[kv_cache]") {
    // decode attends a chunk of many new tokens in blocks of kDecodeQueryRows query rows, each
    // over the keys its last row may see: blocks, their key ranges and the left padding must
    // join up to the causal forward's rows.
    const Index Q = headwise::detail::kDecodeQueryRows;
    const Index B = 2, N = 2 * Q + 45, E = 16;
    std::mt19937_64 rng(9);
    const auto x = Tensor<double>::randn(Shape{B, N, E}, rng);
    Tensor<bool> padding(Shape{B, N});
    for (Index j = 0; j < 5; ++j) padding(1, j) = true;
    const std::vector<std::vector<Index>> chunkings = {{N}, {7, N - 7}, {Q + 1, Q - 1, 45}};
    for (const DecodeConfig& c : decode_grid())
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            MultiheadAttention<double> m = make_module<double>(c, E, p);
            const Tensor<double> expected = causal_forward(m, x, padding);
            KVCache<double> cache = m.make_kv_cache(B, N);
            for (const auto& chunks : chunkings) {
                CAPTURE(chunks);
                cache.clear();
                const Tensor<double> y = decode_in_chunks(m, cache, x, chunks, padding);
                HEADWISE_CHECK_CLOSE(y, expected, 1e-12);
            }
        }
}

TEST_CASE("an unbatched sequence decodes with a cache of batch 1", "[kv_cache]") {
    const Index N = 5, E = 8;
    std::mt19937_64 rng(6);
    const auto x = Tensor<double>::randn(Shape{1, N, E}, rng);
    DecodeConfig c;
    c.H = 2, c.Hkv = 1;
    MultiheadAttention<double> m = make_module<double>(c, E, Projection::fused);
    const Tensor<double> expected = causal_forward(m, x);
    KVCache<double> cache = m.make_kv_cache(1, N);
    for (Index t = 0; t < N; ++t) {
        Tensor<double> token(Shape{1, E});  // [T, E]
        for (Index e = 0; e < E; ++e) token(0, e) = x(0, t, e);
        const Tensor<double> y = m.decode(token, cache);
        REQUIRE(y.shape() == Shape{1, E});
        for (Index e = 0; e < E; ++e)
            CHECK(y(0, e) == Catch::Approx(expected(0, t, e)).epsilon(1e-12));
    }
}

TEST_CASE("a batch of sequences of different lengths decodes with key padding", "[kv_cache]") {
    // Sequence 0 has 7 tokens, sequence 1 has 4, left-padded by 3: its padding keys are never
    // attended, by its own later tokens or any other. The outputs equal one causal forward with
    // the same key_padding_mask (padded query rows see no key there and give out_proj.bias).
    const Index B = 2, N = 7, E = 16;
    std::mt19937_64 rng(8);
    const auto x = Tensor<double>::randn(Shape{B, N, E}, rng);
    Tensor<bool> padding(Shape{B, N});
    for (Index j = 0; j < 3; ++j) padding(1, j) = true;
    for (const DecodeConfig& c : decode_grid())
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            MultiheadAttention<double> m = make_module<double>(c, E, p);
            const Tensor<double> expected = causal_forward(m, x, padding);
            KVCache<double> cache = m.make_kv_cache(B, N);
            const Tensor<double> y = decode_in_chunks(m, cache, x, {4, 1, 2}, padding);
            HEADWISE_CHECK_CLOSE(y, expected, 1e-12);
            // Token by token as well: a prompt chunk, then one token at a time.
            cache.clear();
            const Tensor<double> y1 = decode_in_chunks(m, cache, x, {3, 1, 1, 1, 1}, padding);
            HEADWISE_CHECK_CLOSE(y1, expected, 1e-12);
        }
}

TEST_CASE("the cache holds Hkv key/value heads: Hkv / H the memory of a full one", "[kv_cache]") {
    const Index E = 64, B = 2, capacity = 100;
    MultiheadAttentionOptions o;
    o.embed_dim = E;
    o.num_heads = 8;
    MultiheadAttention<float> full(o, 1);
    o.num_kv_heads = 2;
    MultiheadAttention<float> grouped(o, 1);
    o.num_kv_heads = 1;
    MultiheadAttention<float> mqa(o, 1);
    const KVCache<float> a = full.make_kv_cache(B, capacity);
    const KVCache<float> b = grouped.make_kv_cache(B, capacity);
    const KVCache<float> c = mqa.make_kv_cache(B, capacity);
    // K and V: B * Hkv * capacity * D values each.
    CHECK(a.memory_bytes() == 2 * B * 8 * capacity * 8 * sizeof(float));
    CHECK(b.memory_bytes() * 4 == a.memory_bytes());
    CHECK(c.memory_bytes() * 8 == a.memory_bytes());
    CHECK(c.num_kv_heads() == 1);
    CHECK(c.head_dim() == 8);
    CHECK(c.batch() == B);
    CHECK(c.capacity() == capacity);
    CHECK(c.size() == 0);
}

TEST_CASE("decode errors are clear and leave the cache unchanged", "[kv_cache][errors]") {
    const Index B = 2, N = 6, E = 8;
    std::mt19937_64 rng(9);
    const auto x = Tensor<double>::randn(Shape{B, N, E}, rng);
    DecodeConfig c;
    c.H = 2, c.Hkv = 1;
    MultiheadAttention<double> m = make_module<double>(c, E, Projection::fused);
    const Tensor<double> expected = causal_forward(m, x);
    KVCache<double> cache = m.make_kv_cache(B, N);
    Tensor<double> out(x.shape());
    put_tokens(out, m.decode(tokens(x, 0, 4), cache), 0);
    REQUIRE(cache.size() == 4);

    // Capacity: 4 held + 3 new > 6.
    CHECK_THROWS_WITH(m.decode(tokens(x, 0, 3), cache),
                      "headwise::MultiheadAttention::decode: x_new: 3 new tokens do not fit the "
                      "cache, which holds 4 of capacity 6");
    // Batch and width.
    CHECK_THROWS_WITH(m.decode(Tensor<double>(Shape{3, 1, E}), cache),
                      "headwise::MultiheadAttention::decode: x_new: expected shape [2, T, 8], "
                      "got [3, 1, 8]");
    CHECK_THROWS_AS(m.decode(Tensor<double>(Shape{B, 1, E + 1}), cache), shape_error);
    CHECK_THROWS_AS(m.decode(Tensor<double>(Shape{B, 1, 1, E}), cache), shape_error);
    CHECK_THROWS_AS(m.decode(Tensor<double>(Shape{B, 0, E}), cache), shape_error);
    // Padding of the wrong shape.
    CHECK_THROWS_AS(m.decode(tokens(x, 4, 1), cache, Tensor<bool>(Shape{B, 2})), shape_error);
    // Training mode.
    m.train();
    CHECK_THROWS_WITH(m.decode(tokens(x, 4, 1), cache),
                      "headwise::MultiheadAttention::decode: the module is in training mode; "
                      "decode runs in eval mode, call eval() first");
    m.eval();
    // A cache made by a module of other dimensions.
    DecodeConfig other = c;
    other.Hkv = 2;
    MultiheadAttention<double> m2 = make_module<double>(other, E, Projection::fused);
    CHECK_THROWS_AS(m2.decode(tokens(x, 4, 1), cache), std::invalid_argument);
    KVCache<double> small_batch = m2.make_kv_cache(1, N);
    CHECK_THROWS_AS(m.decode(tokens(x, 4, 1), small_batch), std::invalid_argument);

    // None of it touched the cache: the rest of the sequence decodes as if nothing happened.
    CHECK(cache.size() == 4);
    put_tokens(out, m.decode(tokens(x, 4, 2), cache), 4);
    HEADWISE_CHECK_CLOSE(out, expected, 1e-12);
    // And now it is full.
    CHECK_THROWS_AS(m.decode(tokens(x, 0, 1), cache), std::invalid_argument);
    CHECK(cache.size() == N);
}

TEST_CASE("make_kv_cache checks its arguments and the module", "[kv_cache][errors]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    MultiheadAttention<float> m(o, 1);
    CHECK_THROWS_WITH(
        m.make_kv_cache(0, 4),
        "headwise::MultiheadAttention::make_kv_cache: batch: must be positive, got 0");
    CHECK_THROWS_AS(m.make_kv_cache(1, 0), std::invalid_argument);
    o.kdim = 4;  // decode is self-attention: keys and values are projected from x_new
    MultiheadAttention<float> cross(o, 1);
    CHECK_THROWS_WITH(cross.make_kv_cache(1, 4),
                      "headwise::MultiheadAttention::make_kv_cache: options.kdim, options.vdim: "
                      "decode is self-attention and needs kdim == vdim == embed_dim = 8, got "
                      "kdim 4, vdim 8");
}

TEST_CASE("after the first step, a decode step allocates nothing", "[kv_cache][alloc]") {
    const Index B = 2, N = 40, E = 32;
    std::mt19937_64 rng(10);
    const auto x = Tensor<float>::randn(Shape{B, N, E}, rng);
    std::vector<DecodeConfig> grid = decode_grid();
    grid.push_back(grid[1]);  // rotary embeddings: the tables and positions are scratch too
    grid.back().rotary.enabled = true;
    grid.push_back(grid[3]);
    grid.back().rotary.enabled = true;
    grid.back().rotary.convention = RopeConvention::interleaved;
    for (const DecodeConfig& c : grid)
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            MultiheadAttention<float> m = make_module<float>(c, E, p);
            KVCache<float> cache = m.make_kv_cache(B, N);
            std::vector<Tensor<float>> steps;  // every token, built before counting
            for (Index t = 0; t < N; ++t) steps.push_back(tokens(x, t, 1));
            Tensor<float> y(Shape{B, 1, E});
            m.decode_into(steps[0], cache, y);  // the first step may size the scratch
            long counted = 0;
            for (Index t = 1; t < N; ++t) {
                const long before = test::allocations();
                Eigen::internal::set_is_malloc_allowed(false);
                m.decode_into(steps[static_cast<std::size_t>(t)], cache, y);
                Eigen::internal::set_is_malloc_allowed(true);
                counted += test::allocations() - before;
            }
            CHECK(counted == 0);
            CHECK(cache.size() == N);
            // decode (returning a new tensor) allocates only its result.
            cache.clear();
            (void)m.decode(steps[0], cache);
            const long before = test::allocations();
            (void)m.decode(steps[1], cache);
            CHECK(test::allocations() - before == 1);
        }
}

TEST_CASE("truncate forgets the last tokens, and decoding resumes from there", "[kv_cache]") {
    const Index B = 2, N = 6, E = 8;
    std::mt19937_64 rng(12);
    const auto x = Tensor<double>::randn(Shape{B, N, E}, rng);
    DecodeConfig c;
    c.H = 2, c.Hkv = 1;
    MultiheadAttention<double> m = make_module<double>(c, E, Projection::fused);
    const Tensor<double> expected = causal_forward(m, x);
    KVCache<double> cache = m.make_kv_cache(B, N);
    (void)m.decode(tokens(x, 0, 4), cache);
    (void)m.decode(Tensor<double>::randn(Shape{B, 2, E}, rng), cache);  // two tokens to take back
    CHECK_THROWS_WITH(cache.truncate(7),
                      "headwise::KVCache::truncate: n: must be in [0, size() = 6], got 7");
    cache.truncate(4);
    CHECK(cache.size() == 4);
    Tensor<double> out(x.shape());
    KVCache<double> fresh = m.make_kv_cache(B, N);  // the first 4 outputs, from scratch
    put_tokens(out, m.decode(tokens(x, 0, 4), fresh), 0);
    put_tokens(out, m.decode(tokens(x, 4, 2), cache), 4);
    HEADWISE_CHECK_CLOSE(out, expected, 1e-12);
}

TEST_CASE("clear and truncate keep the padding state true to the tokens held", "[kv_cache]") {
    // has_padding() says whether a held token is padding (decode skips the mask when none is):
    // forgetting the padded tokens must clear it, keeping one must not.
    const Index B = 2, E = 8;
    std::mt19937_64 rng(13);
    const auto x = Tensor<double>::randn(Shape{B, 4, E}, rng);
    MultiheadAttention<double> m = make_module<double>(DecodeConfig{}, E, Projection::fused);
    KVCache<double> cache = m.make_kv_cache(B, 4);
    Tensor<bool> padding(Shape{B, 2});
    padding(1, 1) = true;  // sequence 1's second token
    (void)m.decode(tokens(x, 0, 2), cache, padding);
    CHECK(cache.has_padding());
    cache.truncate(1);  // the padded token is gone
    CHECK_FALSE(cache.has_padding());
    (void)m.decode(tokens(x, 1, 2), cache, padding);  // held: 3 tokens, the last one padded
    cache.truncate(3);
    CHECK(cache.has_padding());
    cache.clear();
    CHECK_FALSE(cache.has_padding());
    CHECK(cache.size() == 0);
}

TEST_CASE("KVCache::append checks its room and padding before it writes", "[kv_cache][errors]") {
    KVCache<double> cache(1, 2, 4, 1, 4);  // batch 1, capacity 2, one head of 4 features
    const RowMatrix<double> k = RowMatrix<double>::Constant(3, 4, 1.0);
    const auto block = [&](Index, Index) { return k.topRows(3); };
    CHECK_THROWS_WITH(cache.append(3, block, block),
                      "headwise::KVCache::append: tokens: must fit the cache, which holds 0 of "
                      "capacity 2, got 3");
    const Tensor<bool> padding(Shape{1, 3});
    const auto two = [&](Index, Index) { return k.topRows(2); };
    CHECK_THROWS_AS(cache.append(2, two, two, padding), shape_error);
    CHECK(cache.size() == 0);
    cache.append(2, two, two);
    CHECK(cache.size() == 2);
    CHECK(cache.key_block(0, 0).sum() == 8.0);
    CHECK(cache.key_padding(0) == nullptr);
    CHECK_THROWS_WITH(KVCache<double>(1, 0, 4, 1, 4),
                      "headwise::KVCache::KVCache: capacity: must be positive, got 0");
}

TEST_CASE("caches sharing one decode scratch decode as caches of their own", "[kv_cache]") {
    // Two modules of different layouts one after the other, as a model's layers decode: their
    // caches share one scratch (share_decode_buffers), which each call resizes and overwrites.
    const Index B = 2, N = 11, E = 16;
    std::mt19937_64 rng(17);
    const auto x = Tensor<double>::randn(Shape{B, N, E}, rng);
    DecodeConfig first, second;
    first.Hkv = 2;
    first.rotary.enabled = true;
    second.H = 2;
    second.bias_kv = true;
    for (Projection p : kProjections) {
        CAPTURE(to_string(p));
        MultiheadAttention<double> m1 = make_module<double>(first, E, p);
        MultiheadAttention<double> m2 = make_module<double>(second, E, p);
        const auto run = [&](KVCache<double>& c1, KVCache<double>& c2) {
            Tensor<double> out(x.shape());
            Index at = 0;
            for (Index t : {3, 1, 4, 2, 1}) {
                put_tokens(out, m2.decode(m1.decode(tokens(x, at, t), c1), c2), at);
                at += t;
            }
            return out;
        };
        KVCache<double> own1 = m1.make_kv_cache(B, N), own2 = m2.make_kv_cache(B, N);
        KVCache<double> shared1 = m1.make_kv_cache(B, N), shared2 = m2.make_kv_cache(B, N);
        shared2.share_decode_buffers(shared1);
        CHECK(shared2.shares_decode_buffers(shared1));
        CHECK(shared1.shares_decode_buffers(shared2));
        CHECK_FALSE(own2.shares_decode_buffers(own1));
        const Tensor<double> expected = run(own1, own2);
        const Tensor<double> got = run(shared1, shared2);
        // The same operations on the same inputs: the same bits.
        CHECK(std::equal(got.data(), got.data() + got.numel(), expected.data()));
        // A copy decodes in a scratch of its own: copies may run at the same time.
        KVCache<double> copy = shared2;
        CHECK_FALSE(copy.shares_decode_buffers(shared2));
        CHECK_FALSE(copy.shares_decode_buffers(shared1));
        copy = shared1;
        CHECK_FALSE(copy.shares_decode_buffers(shared1));
    }
}
