// SPDX-License-Identifier: MIT
// MultiheadAttention with rotary position embeddings (options.rotary): forward against the
// reference loops, the projections and the kernels against each other, gradients by finite
// differences, transformers' LlamaAttention, decoding with the cache (token by token, GQA, left
// padding, the absolute positions of the cached and new tokens), the option checks, and no change
// without RoPE.
#include <headwise/headwise.hpp>

#include <limits>     // std::numeric_limits
#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::stod
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/mha_random.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"

namespace test_mha_rope {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::kProjections;
using headwise::test::MaskKind;
using headwise::test::MhaConfig;
using headwise::test::Tol;
using headwise::test::with;

namespace {

RotaryEmbedding rope(RopeConvention c = RopeConvention::rotate_half, double theta = 10000.0,
                     double factor = 1.0) {
    RotaryEmbedding r;
    r.enabled = true;
    r.theta = theta;
    r.convention = c;
    r.scaling_factor = factor;
    return r;
}

/// The configurations every module test runs: self and cross attention, GQA, masks, appended
/// keys, both conventions, scaling, an unbatched call.
std::vector<MhaConfig> rope_grid() {
    using C = MhaConfig&;
    const RopeConvention half = RopeConvention::rotate_half, pairs = RopeConvention::interleaved;
    return {
        with([&](C c) { c.L = 5, c.rotary = rope(half); }),
        with([&](C c) { c.L = 5, c.E = 12, c.H = 2, c.rotary = rope(pairs); }),
        with([&](C c) {
            c.L = 4, c.E = 16, c.H = 4, c.Hkv = 2, c.masks = MaskKind::causal;
            c.rotary = rope(half, 500000.0, 4.0);
        }),
        with([&](C c) {
            c.inputs = Inputs::distinct, c.L = 3, c.S = 6, c.kdim = 5, c.vdim = 7;
            c.masks = MaskKind::key_padding, c.rotary = rope(pairs, 100.0, 2.0);
        }),
        with([&](C c) {
            c.inputs = Inputs::kv_same, c.L = 4, c.S = 2, c.H = 4, c.Hkv = 1;
            c.bias_kv = true, c.zero_attn = true, c.masks = MaskKind::all;
            c.rotary = rope(half, 10.0);
        }),
        with([&](C c) { c.batched = false, c.bias = false, c.rotary = rope(pairs); }),
    };
}

/// Forward of a configuration's data, in the module's current mode.
template <class T>
AttentionForward<T> run(MultiheadAttention<T>& m, const test::MhaData<T>& d) {
    return m.forward(d.q, d.key(), d.value(), d.masks);
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

/// A self-attention module for decoding: random parameters, eval mode.
template <class T>
MultiheadAttention<T> decoder(Index E, Index H, Index Hkv, const RotaryEmbedding& r, Projection p,
                              bool bias_kv = false) {
    MultiheadAttentionOptions o;
    o.embed_dim = E;
    o.num_heads = H;
    o.num_kv_heads = Hkv;
    o.projection = p;
    o.add_bias_kv = bias_kv;
    o.rotary = r;
    MultiheadAttention<T> m(o, 21);
    test::randomize_parameters(m, 22);
    m.eval();
    return m;
}

template <class T>
Tensor<T> causal_forward(MultiheadAttention<T>& m, const Tensor<T>& x) {
    AttentionMasks<T> masks;
    masks.is_causal = true;
    return m.forward(x, x, x, masks).output;
}

}  // namespace

TEMPLATE_TEST_CASE("forward with RoPE matches the reference loops", "[mha][rope]", float, double) {
    using T = TestType;
    for (const MhaConfig& c : rope_grid())
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            const test::MhaData<T> d = test::make_data<T>(c);
            MultiheadAttention<T> m(c.options(p), 42);
            test::randomize_parameters(m, 43);
            const AttentionForward<T> f = run(m, d);
            const test::ReferenceAttention r = test::run_reference(c, m, d);
            HEADWISE_CHECK_CLOSE(f.output, Tensor<double>(f.output.shape(), r.output), Tol<T>::rel);
            // The same module without RoPE is another function: the test can tell them apart.
            MultiheadAttentionOptions plain = c.options(p);
            plain.rotary.enabled = false;
            MultiheadAttention<T> m0(plain, 42);
            m0.load_state_dict(m.state_dict());
            CHECK(test::scaled_difference(run(m0, d).output, f.output).rel > 1e-3);
        }
}

TEMPLATE_TEST_CASE(
    "with RoPE the three projections and the two kernels agree, forward and "
    "backward",
    "[mha][rope]", float, double) {
    using T = TestType;
    for (const MhaConfig& c : rope_grid()) {
        const test::MhaData<T> d = test::make_data<T>(c);
        test::MhaData<T> dn = d;
        dn.masks.need_weights = false;  // the blocked kernel runs without weights
        std::mt19937_64 rng(9);
        Tensor<T> dy;
        AttentionForward<T> f0;
        AttentionGradients<T> g0;
        std::map<std::string, Tensor<T>> grads0;
        for (Projection p : kProjections)
            for (AttentionKernel k : {AttentionKernel::materialised, AttentionKernel::blocked}) {
                CAPTURE(c.str(), to_string(p), to_string(k));
                MultiheadAttentionOptions o = c.options(p);
                o.attention_kernel = k;
                o.attention_tiles = ops::AttentionTiles{2, 3};  // short sequences cross tiles
                MultiheadAttention<T> m(o, 42);
                test::randomize_parameters(m, 43);
                const AttentionForward<T> f = run(m, dn);
                if (dy.empty()) dy = Tensor<T>::randn(f.output.shape(), rng);
                const AttentionGradients<T> g = m.backward(f, dy);
                const auto grads = m.grad_dict();
                if (f0.output.empty()) {
                    f0 = f, g0 = g, grads0 = grads;
                    continue;
                }
                HEADWISE_CHECK_CLOSE(f.output, f0.output, Tol<T>::rel);
                HEADWISE_CHECK_CLOSE(g.query, g0.query, Tol<T>::rel);
                if (!g.key.empty()) HEADWISE_CHECK_CLOSE(g.key, g0.key, Tol<T>::rel);
                if (!g.value.empty()) HEADWISE_CHECK_CLOSE(g.value, g0.value, Tol<T>::rel);
                for (const auto& [name, t] : grads) {
                    CAPTURE(name);
                    HEADWISE_CHECK_CLOSE(t, grads0.at(name), Tol<T>::rel);
                }
            }
    }
}

TEST_CASE("every projection rotates each head's block the same way, to the bit", "[mha][rope]") {
    // With one head of D = E features and weights that are the identity, every projection's
    // GEMM computes the same products in the same order, so the rotated Q and K, and hence the
    // outputs, must be identical bit for bit: a projection that rotated another block, another
    // head or at other positions would differ.
    const Index E = 8, L = 6;
    for (RopeConvention conv : {RopeConvention::rotate_half, RopeConvention::interleaved}) {
        CAPTURE(to_string(conv));
        std::mt19937_64 rng(3);
        const auto x = Tensor<double>::randn(Shape{2, L, E}, rng);
        Tensor<double> out0;
        for (Projection p : kProjections) {
            MultiheadAttentionOptions o;
            o.embed_dim = E;
            o.num_heads = 1;
            o.projection = p;
            o.bias = false;
            o.rotary = rope(conv, 50.0);
            MultiheadAttention<double> m(o, 1);
            auto sd = m.state_dict();
            sd.at("in_proj_weight").fill(0.0);
            for (Index i = 0; i < 3 * E; ++i) sd.at("in_proj_weight")(i, i % E) = 1.0;
            m.load_state_dict(sd);
            const Tensor<double> y = m.forward(x, x, x).output;
            if (out0.empty())
                out0 = y;
            else
                CHECK(test::identical(y, out0));
        }
    }
}

TEST_CASE("MultiheadAttention with RoPE: gradients match finite differences",
          "[mha][rope][gradcheck]") {
    std::vector<MhaConfig> grid = rope_grid();
    grid.push_back(with([](MhaConfig& c) {
        c.L = 4, c.dropout = 0.3, c.masks = MaskKind::causal;
        c.rotary = rope(RopeConvention::interleaved, 1000.0, 3.0);
    }));
    for (const MhaConfig& c : grid)
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            test::MhaData<double> d = test::make_data<double>(c);
            d.masks.need_weights = false;
            const MultiheadAttention<double> init(c.options(p), 17);
            std::vector<std::string> names;
            std::vector<Tensor<double>> inputs{d.q};
            if (c.inputs != Inputs::self) inputs.push_back(d.k);
            if (c.inputs == Inputs::distinct) inputs.push_back(d.v);
            const std::size_t n_args = inputs.size();
            std::mt19937_64 prng(5);
            for (const auto& [name, t] : init.state_dict()) {
                names.push_back(name);
                inputs.push_back(name.find("bias") != std::string::npos
                                     ? Tensor<double>::randn(t.shape(), prng)
                                     : t);
            }
            // A fresh module per evaluation (same seed: the same dropout mask every time).
            const auto forward = [=](const std::vector<Tensor<double>>& x,
                                     MultiheadAttention<double>& m) {
                MultiheadAttention<double>::StateDict sd;
                for (std::size_t i = 0; i < names.size(); ++i) sd[names[i]] = x[n_args + i];
                m.load_state_dict(sd);
                const Tensor<double>& q = x[0];
                const Tensor<double>& k = n_args > 1 ? x[1] : x[0];
                const Tensor<double>& v = n_args > 2 ? x[2] : k;
                return m.forward(q, k, v, d.masks);
            };
            const auto f = [=](const std::vector<Tensor<double>>& x) {
                MultiheadAttention<double> m(c.options(p), 99);
                return forward(x, m).output;
            };
            const auto back = [=](const std::vector<Tensor<double>>& x, const Tensor<double>& dy) {
                MultiheadAttention<double> m(c.options(p), 99);
                AttentionBackwardOptions bo;
                bo.combine_self = true;
                const AttentionGradients<double> g = m.backward(forward(x, m), dy, bo);
                std::vector<Tensor<double>> out;
                if (n_args == 1) {
                    out.push_back(g.input);
                } else if (n_args == 2) {  // key is value
                    out.push_back(g.query);
                    Tensor<double> s = g.key;
                    for (Index i = 0; i < s.numel(); ++i) s.data()[i] += g.value.data()[i];
                    out.push_back(std::move(s));
                } else {
                    out.insert(out.end(), {g.query, g.key, g.value});
                }
                const auto grads = m.grad_dict();
                for (const std::string& name : names) out.push_back(grads.at(name));
                return out;
            };
            std::mt19937_64 rng(3);
            GradcheckOptions options;
            options.eps = 1e-5;
            const GradcheckResult r = gradcheck(f, back, inputs, rng, options);
            INFO("worst: " << r.where << " (relative " << r.max_rel_error << ", " << r.checked
                           << " partials)");
            CHECK(r.checked > 100);
            CHECK(r.max_rel_error <= 1e-6);
        }
}

TEMPLATE_TEST_CASE("MultiheadAttention with RoPE matches transformers' LlamaAttention",
                   "[mha][rope][golden]", float, double) {
    using T = TestType;
    const double tol = test::kGoldenTolerance<T>;
    for (const std::string& name : test::golden_case_names("rope")) {
        const test::GoldenCase g = test::load_golden_case(name, "rope");
        if (g.meta.at("kind") != "module") continue;
        for (Projection p : kProjections) {
            CAPTURE(name, to_string(p));
            MultiheadAttentionOptions o;
            o.embed_dim = g.meta_int("embed_dim");
            o.num_heads = g.meta_int("num_heads");
            o.num_kv_heads = g.meta_int("num_kv_heads");
            o.bias = g.flag("bias");
            o.projection = p;
            o.rotary = rope(RopeConvention::rotate_half, std::stod(g.meta.at("theta")),
                            std::stod(g.meta.at("factor")));
            MultiheadAttention<T> m(o, 1);
            typename MultiheadAttention<T>::StateDict sd;
            for (const auto& [key, t] : g.state_dict()) {
                Tensor<T> v(t.shape());
                for (Index i = 0; i < t.numel(); ++i) v.data()[i] = static_cast<T>(t.data()[i]);
                sd[key] = v;
            }
            m.load_state_dict(sd);
            auto cast = [](const Tensor<double>& t) {
                Tensor<T> v(t.shape());
                for (Index i = 0; i < t.numel(); ++i) v.data()[i] = static_cast<T>(t.data()[i]);
                return v;
            };
            const Tensor<T> x = cast(g.tensor("query"));
            AttentionMasks<T> masks;
            masks.is_causal = true;
            const AttentionForward<T> f = m.forward(x, x, x, masks);
            HEADWISE_CHECK_CLOSE(f.output, g.tensor("output"), tol);
            AttentionBackwardOptions bo;
            bo.combine_self = true;
            const AttentionGradients<T> dx = m.backward(f, cast(g.tensor("grad_output")), bo);
            HEADWISE_CHECK_CLOSE(dx.input, g.tensor("grad_query"), tol);
            const auto grads = m.grad_dict();
            for (const auto& [key, t] : g.grads) {
                CAPTURE(key);
                HEADWISE_CHECK_CLOSE(grads.at(key), t, tol);
            }
            // Decoding token by token gives the same outputs.
            m.eval();
            KVCache<T> cache = m.make_kv_cache(x.size(0), x.size(1));
            Tensor<T> y(x.shape());
            for (Index t = 0; t < x.size(1); ++t)
                put_tokens(y, m.decode(tokens(x, t, 1), cache), t);
            HEADWISE_CHECK_CLOSE(y, g.tensor("output"), tol);
        }
    }
}

TEMPLATE_TEST_CASE("decoding with RoPE token by token and in chunks equals one causal forward",
                   "[mha][rope][kv_cache]", float, double) {
    using T = TestType;
    const Index B = 2, N = 9, E = 16;
    std::mt19937_64 rng(4);
    const auto x = Tensor<T>::randn(Shape{B, N, E}, rng);
    struct Case {
        Index H, Hkv;
        RotaryEmbedding r;
        bool bias_kv;
    };
    const std::vector<Case> cases = {
        {4, 0, rope(), false},
        {4, 2, rope(RopeConvention::interleaved, 500.0, 2.0), false},
        {4, 1, rope(RopeConvention::rotate_half, 10000.0, 8.0), true},
        {8, 2, rope(RopeConvention::interleaved), true},
    };
    for (const Case& c : cases)
        for (Projection p : kProjections) {
            CAPTURE(c.H, c.Hkv, to_string(c.r.convention), c.r.scaling_factor, c.bias_kv,
                    to_string(p));
            MultiheadAttention<T> m = decoder<T>(E, c.H, c.Hkv, c.r, p, c.bias_kv);
            const Tensor<T> expected = causal_forward(m, x);
            for (const std::vector<Index>& chunks :
                 {std::vector<Index>(N, 1), std::vector<Index>{4, 1, 3, 1}, {9}}) {
                CAPTURE(chunks);
                KVCache<T> cache = m.make_kv_cache(B, N);
                Tensor<T> y(x.shape());
                Index first = 0;
                for (Index t : chunks) {
                    put_tokens(y, m.decode(tokens(x, first, t), cache), first);
                    first += t;
                    CHECK(cache.position(0) == first);
                }
                HEADWISE_CHECK_CLOSE(y, expected, Tol<T>::rel);
            }
        }
}

TEST_CASE("left-padded batched decoding with RoPE equals each sequence decoded alone",
          "[mha][rope][kv_cache]") {
    // Prompts of 6, 3 and 1 tokens, left-padded to 6, then 3 steps for all: each sequence's real
    // tokens are at positions 0, 1, ... as when it is decoded alone.
    const Index B = 3, N = 6, E = 16, steps = 3;
    const Index lengths[B] = {6, 3, 1};
    std::mt19937_64 rng(8);
    const auto prompts = Tensor<double>::randn(Shape{B, N, E}, rng);
    const auto next = Tensor<double>::randn(Shape{B, steps, E}, rng);
    Tensor<bool> padding(Shape{B, N});
    for (Index b = 0; b < B; ++b)
        for (Index j = 0; j < N - lengths[b]; ++j) padding(b, j) = true;
    for (RopeConvention conv : {RopeConvention::rotate_half, RopeConvention::interleaved})
        for (Projection p : kProjections) {
            CAPTURE(to_string(conv), to_string(p));
            MultiheadAttention<double> m = decoder<double>(E, 4, 2, rope(conv, 1000.0), p);
            KVCache<double> batch = m.make_kv_cache(B, N + steps);
            // The prompt in two chunks, so that padding flags also come from an earlier call.
            const Tensor<double> out_a = m.decode(tokens(prompts, 0, 4), batch, [&] {
                Tensor<bool> pad(Shape{B, 4});
                for (Index b = 0; b < B; ++b)
                    for (Index j = 0; j < 4; ++j) pad(b, j) = padding(b, j);
                return pad;
            }());
            const Tensor<double> out_b = m.decode(tokens(prompts, 4, 2), batch, [&] {
                Tensor<bool> pad(Shape{B, 2});
                for (Index b = 0; b < B; ++b)
                    for (Index j = 0; j < 2; ++j) pad(b, j) = padding(b, 4 + j);
                return pad;
            }());
            for (Index b = 0; b < B; ++b) CHECK(batch.position(b) == lengths[b]);
            std::vector<Tensor<double>> step_out;
            for (Index s = 0; s < steps; ++s)
                step_out.push_back(m.decode(tokens(next, s, 1), batch));
            for (Index b = 0; b < B; ++b) {
                CAPTURE(b);
                const Index n = lengths[b], pad = N - n;
                Tensor<double> alone(Shape{1, n + steps, E});
                for (Index t = 0; t < n; ++t)
                    for (Index e = 0; e < E; ++e) alone(0, t, e) = prompts(b, pad + t, e);
                for (Index s = 0; s < steps; ++s)
                    for (Index e = 0; e < E; ++e) alone(0, n + s, e) = next(b, s, e);
                // Alone: one causal forward (positions 0..n + steps - 1), no padding.
                const Tensor<double> expected = causal_forward(m, alone);
                Tensor<double> got(Shape{1, n + steps, E});
                for (Index t = 0; t < n; ++t)
                    for (Index e = 0; e < E; ++e)
                        got(0, t, e) =
                            pad + t < 4 ? out_a(b, pad + t, e) : out_b(b, pad + t - 4, e);
                for (Index s = 0; s < steps; ++s)
                    for (Index e = 0; e < E; ++e)
                        got(0, n + s, e) = step_out[static_cast<std::size_t>(s)](b, 0, e);
                HEADWISE_CHECK_CLOSE(got, expected, 1e-12);
            }
            // truncate counts the positions again from the padding flags.
            batch.truncate(5);
            CHECK(batch.position(0) == 5);
            CHECK(batch.position(1) == 2);
            CHECK(batch.position(2) == 0);
            batch.clear();
            CHECK(batch.position(1) == 0);
        }
}

TEST_CASE("decode rotates each new token at its absolute position, without bias_kv too",
          "[mha][rope][kv_cache]") {
    // RoPE is relative: the scores depend on m - n only, so a decode that put every token one
    // position late would still equal forward whenever all the keys come from decode (only
    // bias_k, which has no position, would tell). Two checks that see absolute positions:
    // (1) the cached keys equal the keys of the same module without RoPE rotated here at each
    // token's position (left padding included); (2) keys appended as forward rotates them
    // (positions 0..P-1), then new tokens decoded after them, equal one causal forward.
    const Index B = 2, N = 7, E = 16, H = 4, P = 4;
    const double theta = 100.0, factor = 2.0;
    std::mt19937_64 rng(31);
    const auto x = Tensor<double>::randn(Shape{B, N, E}, rng);
    Tensor<bool> first_padding(Shape{B, 3});  // sequence 1 left-padded by 2 in the first chunk
    first_padding(1, 0) = first_padding(1, 1) = true;
    using Rows = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    for (RopeConvention conv : {RopeConvention::rotate_half, RopeConvention::interleaved})
        for (Index Hkv : {H, Index{2}})
            for (Projection p : kProjections) {
                CAPTURE(to_string(conv), Hkv, to_string(p));
                MultiheadAttention<double> m =
                    decoder<double>(E, H, Hkv, rope(conv, theta, factor), p);
                MultiheadAttentionOptions plain = m.options();
                plain.rotary.enabled = false;
                MultiheadAttention<double> m0(plain, 21);
                m0.load_state_dict(m.state_dict());
                m0.eval();
                const Index D = E / H;
                // Rows of K [n, D] rotated at positions pos[0..n).
                const auto rotated = [&](const Rows& K, const std::vector<Index>& pos) {
                    const auto n = static_cast<Index>(pos.size());
                    Tensor<double> cos(Shape{n, D / 2}), sin(Shape{n, D / 2});
                    ops::rope_tables<double>(pos.data(), theta, factor, cos.matrix(), sin.matrix());
                    Rows Y(n, D);
                    ops::rope_forward<double>(K, cos.matrix(), sin.matrix(), conv, Y);
                    return Y;
                };

                // (1) Chunks of 3, 2, 2, the first left-padded in sequence 1.
                KVCache<double> cache = m.make_kv_cache(B, N), plain_cache = m0.make_kv_cache(B, N);
                m.decode(tokens(x, 0, 3), cache, first_padding);
                m0.decode(tokens(x, 0, 3), plain_cache, first_padding);
                for (Index first = 3; first < N; first += 2) {
                    m.decode(tokens(x, first, 2), cache);
                    m0.decode(tokens(x, first, 2), plain_cache);
                }
                for (Index b = 0; b < B; ++b) {
                    const Index pad = b == 1 ? 2 : 0;  // real tokens t >= pad, at t - pad
                    std::vector<Index> pos;
                    for (Index t = pad; t < N; ++t) pos.push_back(t - pad);
                    for (Index h = 0; h < cache.num_kv_heads(); ++h) {
                        CAPTURE(b, h);
                        const Rows expected =
                            rotated(plain_cache.key_block(b, h).bottomRows(N - pad), pos);
                        const Rows got = cache.key_block(b, h).bottomRows(N - pad);
                        CHECK((got - expected).cwiseAbs().maxCoeff() < 1e-12);
                    }
                }

                // (2) The first P tokens' keys and values appended as forward has them.
                KVCache<double> plain_prompt = m0.make_kv_cache(B, P);
                m0.decode(tokens(x, 0, P), plain_prompt);
                std::vector<Index> prompt_positions(static_cast<std::size_t>(P));
                for (Index t = 0; t < P; ++t) prompt_positions[static_cast<std::size_t>(t)] = t;
                KVCache<double> mixed = m.make_kv_cache(B, N);
                mixed.append(
                    P,
                    [&](Index b, Index h) {
                        return rotated(plain_prompt.key_block(b, h), prompt_positions);
                    },
                    [&](Index b, Index h) { return Rows(plain_prompt.value_block(b, h)); });
                CHECK(mixed.position(0) == P);
                const Tensor<double> got = m.decode(tokens(x, P, N - P), mixed);  // [B, N - P, E]
                HEADWISE_CHECK_CLOSE(got, tokens(causal_forward(m, x), P, N - P), 1e-12);
            }
}

TEST_CASE("RoPE options are checked, and backward refuses a forward with other RoPE options",
          "[mha][rope][errors]") {
    const std::string fn = "headwise::MultiheadAttention::MultiheadAttention: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 12;
    o.num_heads = 4;  // D = 3
    o.rotary = rope();
    CHECK_THROWS_WITH(MultiheadAttention<double>(o),
                      fn + "options.rotary.enabled: needs an even head dimension D (head_dim, "
                           "or embed_dim / num_heads when it is 0; RoPE rotates pairs of "
                           "features), got D = 3");
    o.num_heads = 3;  // D = 4
    o.rotary.theta = 1.0;
    CHECK_THROWS_WITH(MultiheadAttention<double>(o),
                      fn + "options.rotary.theta: must be finite and greater than 1, got 1");
    o.rotary.theta = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH(MultiheadAttention<double>(o),
                      fn + "options.rotary.theta: must be finite and greater than 1, got inf");
    o.rotary.theta = 10000.0;
    o.rotary.scaling_factor = 0.5;
    CHECK_THROWS_WITH(MultiheadAttention<float>(o),
                      fn + "options.rotary.scaling_factor: must be finite and at least 1, got 0.5");
    o.rotary.scaling_factor = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    o.rotary.scaling_factor = 1.0;
    o.rotary.convention = static_cast<RopeConvention>(7);
    CHECK_THROWS_WITH(MultiheadAttention<float>(o),
                      fn + "options.rotary.convention: must be rotate_half or interleaved, got "
                           "RopeConvention(7)");
    // Disabled: the other fields are not looked at.
    o.rotary.enabled = false;
    o.num_heads = 4;
    CHECK_NOTHROW(MultiheadAttention<float>(o));

    // A forward made with other RoPE settings.
    MultiheadAttentionOptions a;
    a.embed_dim = 8;
    a.num_heads = 2;
    a.rotary = rope(RopeConvention::rotate_half, 10000.0);
    MultiheadAttentionOptions b = a;
    b.rotary.theta = 500.0;
    b.rotary.convention = RopeConvention::interleaved;
    MultiheadAttentionOptions none = a;
    none.rotary.enabled = false;
    MultiheadAttention<double> ma(a, 1), mb(b, 1), mn(none, 1);
    std::mt19937_64 rng(2);
    const auto x = Tensor<double>::randn(Shape{1, 3, 8}, rng);
    const auto fa = ma.forward(x, x, x);
    const std::string bw =
        "headwise::MultiheadAttention::backward: fwd: comes from a module with other options (";
    CHECK_THROWS_WITH(mb.backward(fa, fa.output),
                      bw + "rotary.theta: expected 5e+02, got 1e+04; rotary.convention: expected "
                           "interleaved, got rotate_half)");
    CHECK_THROWS_WITH(mn.backward(fa, fa.output), bw + "rotary.enabled: expected 0, got 1)");
}

TEST_CASE("a module without RoPE computes as before, whatever the unused RoPE fields say",
          "[mha][rope]") {
    MhaConfig c;
    c.L = 5;
    c.masks = MaskKind::causal;
    const test::MhaData<double> d = test::make_data<double>(c);
    for (Projection p : kProjections) {
        CAPTURE(to_string(p));
        MultiheadAttention<double> m(c.options(p), 42);
        MultiheadAttentionOptions o = c.options(p);
        o.rotary.theta = 3.0;  // ignored while disabled
        o.rotary.convention = RopeConvention::interleaved;
        MultiheadAttention<double> m2(o, 42);
        const auto f = run(m, d), f2 = run(m2, d);
        CHECK(test::identical(f.output, f2.output));
        const test::ReferenceAttention r = test::run_reference(c, m, d);
        HEADWISE_CHECK_CLOSE(f.output, Tensor<double>(f.output.shape(), r.output), 1e-12);
        // Backward across the two: the unused fields are not compared.
        CHECK_NOTHROW(m2.backward(f, f.output));
    }
}

}  // namespace test_mha_rope
