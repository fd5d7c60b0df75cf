// SPDX-License-Identifier: MIT
// The model of train_gpt: a small GPT-style causal language model written as its forward on a tape.
#pragma once

#include <headwise/autograd/functions.hpp>   // apply, reshape
#include <headwise/autograd/sequential.hpp>  // Sequential
#include <headwise/autograd/tape.hpp>        // Tape, Var
#include <headwise/headwise.hpp>

#include <algorithm>  // std::for_each
#include <cstdint>    // std::int64_t, std::uint64_t
#include <optional>   // std::nullopt
#include <string>     // std::to_string
#include <vector>     // std::vector

namespace gpt_model {

namespace ag = headwise::autograd;
using ag::Tape;
using ag::Var;
using headwise::AttentionMasks;
using headwise::Embedding;
using headwise::GELU;
using headwise::Generator;
using headwise::Index;
using headwise::LayerNorm;
using headwise::Linear;
using headwise::Module;
using headwise::MultiheadAttention;
using headwise::Shape;
using headwise::Tensor;

/// The sizes: vocabulary, longest context, width, heads and blocks.
struct Config {
    Index vocab = 12, context = 16, d_model = 64, heads = 4, layers = 2;
    headwise::MultiheadAttentionOptions attention() const {
        headwise::MultiheadAttentionOptions o;
        o.embed_dim = d_model;
        o.num_heads = heads;
        return o;
    }
};

// ---- the model ---------------------------------------------------------------------------------

/// A pre-norm block: h = x + attn(ln_1(x)) under a causal mask, then h + mlp(h).
template <class T>
struct Block : Module<Block<T>, T> {
    static constexpr const char* kName = "gpt_model::Block";
    LayerNorm<T> ln_1;
    MultiheadAttention<T> attn;
    ag::Sequential<LayerNorm<T>, Linear<T>, GELU<T>, Linear<T>> mlp;  // ln_2, E -> 4 E -> E
    Block(const Config& c, std::uint64_t seed, Generator& rng)
        : ln_1(c.d_model),
          attn(c.attention(), seed),
          mlp{LayerNorm<T>(c.d_model), Linear<T>(c.d_model, 4 * c.d_model, true, rng), GELU<T>(),
              Linear<T>(4 * c.d_model, c.d_model, true, rng)} {}  // braces: drawn left to right
    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        Block::visit_child(self.ln_1, "ln_1.", visit);
        Block::visit_child(self.attn, "attn.", visit);
        Block::visit_child(self.mlp, "mlp.", visit);
    }
    template <class Self, class Visit>
    static void visit_children(Self& s, Visit&& v) {
        v(s.ln_1), v(s.attn), v(s.mlp);
    }
    Var<T> forward(const Var<T>& x, const AttentionMasks<T>& causal) {
        const Var<T> h = x + ag::apply(attn, ag::apply(ln_1, x), causal);  // residual adds: the
        return h + ag::apply(mlp, h);  // tape sums the gradients of x's and h's two uses
    }
};

/// Embeddings (token, learnt position), blocks, final LayerNorm and LM head (untied).
template <class T>
struct GPT : Module<GPT<T>, T> {
    static constexpr const char* kName = "gpt_model::GPT";
    Embedding<T> wte, wpe;
    std::vector<Block<T>> h;
    ag::Sequential<LayerNorm<T>, Linear<T>> head;  // head.0: ln_f, head.1: the LM head
    GPT(const Config& c, Generator& rng)
        : wte(c.vocab, c.d_model, std::nullopt, rng),
          wpe(c.context, c.d_model, std::nullopt, rng),
          head{LayerNorm<T>(c.d_model), Linear<T>(c.d_model, c.vocab, /*bias=*/false, rng)} {
        for (Index i = 0; i < c.layers; ++i) h.emplace_back(c, 100 + std::uint64_t(i), rng);
    }
    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        GPT::visit_child(self.wte, "wte.", visit);
        GPT::visit_child(self.wpe, "wpe.", visit);
        for (std::size_t i = 0; i < self.h.size(); ++i)
            GPT::visit_child(self.h[i], "h." + std::to_string(i) + ".", visit);
        GPT::visit_child(self.head, "head.", visit);
    }
    template <class Self, class Visit>
    static void visit_children(Self& s, Visit&& v) {
        v(s.wte), v(s.wpe), v(s.head), std::for_each(s.h.begin(), s.h.end(), v);
    }
    Var<T> forward(Tape<T>& tape, const Tensor<std::int64_t>& ids) {  // [B, L] -> [B L, vocab]
        Tensor<std::int64_t> pos(ids.shape());  // 0, 1, ..., L - 1 in every row
        for (Index i = 0; i < pos.numel(); ++i) pos.data()[i] = i % ids.shape()[1];
        AttentionMasks<T> causal;
        causal.is_causal = true;  // position i attends to positions j <= i only
        Var<T> x = ag::apply(wte, tape, ids) + ag::apply(wpe, tape, pos);  // [B, L, E]
        for (Block<T>& block : h) x = block.forward(x, causal);
        return ag::reshape(ag::apply(head, x), Shape{ids.numel(), wte.num_embeddings()});
    }
};

}  // namespace gpt_model
