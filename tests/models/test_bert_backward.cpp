// SPDX-License-Identifier: MIT
// BertModel::backward and BertLayer::backward: every parameter's gradient and each head gate's
// against central differences of sum(w ⊙ last_hidden_state) in double (with and without
// padding, with a head_mask, on a pruned model); a pruned model's gradients against the
// unpruned model's with the pruned heads' gates at 0; records, shapes and weights refused; the
// sentence embedding's pooling and normalisation backward, and a loss over embeddings.

#include <headwise/models/bert.hpp>
#include <headwise/models/sentence_embedding.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <cstdint>    // std::int64_t
#include <map>        // std::map
#include <random>     // std::mt19937_64, std::normal_distribution
#include <stdexcept>  // std::invalid_argument, std::logic_error
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"

namespace test_bert_backward {

using headwise::Index;
using headwise::Parameter;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::models::BertConfig;
using headwise::models::BertForward;
using headwise::models::BertGradients;
using headwise::models::BertModel;
using headwise::models::HeadOptions;
using headwise::models::HeadsToPrune;
using headwise::models::Pooling;

namespace {

// Central differences: step and the bound on max |analytic - numeric| / max |numeric| per tensor.
constexpr double kStep = 1e-5;
constexpr double kRelative = 1e-7;
// A pruned model against the unpruned one with the pruned heads' gates at 0.
constexpr double kPruned = 1e-12;
// The largest relative difference seen (printed with -s).
double worst = 0;

BertConfig tiny_config() {
    BertConfig c;
    c.vocab_size = 23;
    c.hidden_size = 16;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.intermediate_size = 32;
    c.max_position_embeddings = 9;
    c.type_vocab_size = 2;
    c.pad_token_id = 0;
    return c;
}

// A model whose every parameter is off its initial value (LayerNorm weights near 1, biases
// near 0, no longer exactly), so that no gradient term vanishes by construction.
BertModel<double> tiny_model(const BertConfig& c, std::uint64_t seed) {
    BertModel<double> model(c, Projection::fused, seed);
    std::mt19937_64 rng(seed + 100);
    std::normal_distribution<double> noise(0.0, 0.1);
    for (Parameter<double>& p : model.parameters())
        for (Index i = 0; i < p.value.numel(); ++i) p.value.data()[i] += noise(rng);
    return model;
}

// Input ids [2, 6] with token types; `padded`: the second sequence padded (with the pad id)
// after 4 tokens.
struct Batch {
    Tensor<std::int64_t> ids{Shape{2, 6}, {2, 7, 11, 5, 19, 3, 2, 13, 0, 21, 0, 0}};
    Tensor<std::int64_t> types{Shape{2, 6}, {0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0}};
    Tensor<bool> padding{Shape{2, 6}};
    Tensor<double> w{Shape{2, 6, 16}};  // the loss's weights
    explicit Batch(bool padded) {
        if (padded) padding(1, 4) = padding(1, 5) = true;
        std::mt19937_64 rng(7);
        std::normal_distribution<double> normal(0.0, 1.0);
        for (Index i = 0; i < w.numel(); ++i) w.data()[i] = normal(rng);
    }
    TensorView<const bool> mask(bool padded) const {
        return padded ? padding.view() : TensorView<const bool>{};
    }
};

double loss(const Tensor<double>& hidden, const Tensor<double>& w) {
    REQUIRE(hidden.numel() == w.numel());
    double s = 0;
    for (Index i = 0; i < w.numel(); ++i) s += w.data()[i] * hidden.data()[i];
    return s;
}

// The largest |a - b| over the largest |b| (|a - b| when b is all zeros), printed with where.
struct Compare {
    double diff = 0, scale = 0;
    void add(double a, double b) {
        diff = std::max(diff, std::abs(a - b));
        scale = std::max(scale, std::abs(b));
    }
    double relative() const { return scale == 0 ? diff : diff / scale; }
};

// The positions of a tensor of n values that the central differences visit: every one of a
// small tensor, about 60 spread over a large one (its first and last included).
std::vector<Index> probes(Index n) {
    std::vector<Index> at;
    const Index stride = std::max<Index>(1, n / 60);
    for (Index i = 0; i < n; i += stride) at.push_back(i);
    if (at.back() != n - 1) at.push_back(n - 1);
    return at;
}

struct Run {
    const Batch& in;
    bool padded;
    HeadOptions<double> heads;
    double operator()(BertModel<double>& m) const {
        return loss(m.forward(in.ids, in.mask(padded), in.types, heads).last_hidden_state, in.w);
    }
};

// Every parameter's gradient after one backward against central differences of the loss.
void check_parameters(BertModel<double>& model, const Run& run) {
    model.train();
    model.zero_grad();
    const BertForward<double> f =
        model.forward_train(run.in.ids, run.in.mask(run.padded), run.in.types, run.heads);
    REQUIRE(f.differentiable());
    model.backward(f, run.in.w);
    model.eval();
    const Index pad = model.config().pad_token_id, E = model.config().hidden_size;
    for (Parameter<double>& p : model.parameters()) {
        CAPTURE(p.name);
        const bool word = p.name == "embeddings.word_embeddings.weight";
        if (word)  // the pad token's row takes no gradient (torch's padding_idx)
            for (Index e = 0; e < E; ++e) CHECK(p.grad.data()[pad * E + e] == 0.0);
        Compare c;
        for (Index i : probes(p.value.numel())) {
            if (word && i / E == pad) continue;
            double& v = p.value.data()[i];
            const double keep = v;
            v = keep + kStep;
            const double up = run(model);
            v = keep - kStep;
            const double down = run(model);
            v = keep;
            c.add(p.grad.data()[i], (up - down) / (2 * kStep));
        }
        CAPTURE(c.diff, c.scale);
        if (p.name.find("attention.self.key.bias") != std::string::npos) {
            // Zero: a key bias adds q . b to every score of a row, which softmax ignores; the
            // differences are rounding.
            for (Index i = 0; i < p.grad.numel(); ++i) CHECK(std::abs(p.grad.data()[i]) < 1e-12);
            CHECK(c.diff < 1e-8);
            continue;
        }
        CHECK(c.scale > 0);
        CHECK(c.relative() < kRelative);
        worst = std::max(worst, c.relative());
    }
}

// Gates [N, H] away from 0 and 1 (and one at 0).
Tensor<double> some_gates(Index N, Index H) {
    Tensor<double> g(Shape{N, H});
    for (Index i = 0; i < N * H; ++i) g.data()[i] = 0.25 * static_cast<double>((i * 7) % 5) + 0.1;
    g.data()[1] = 0.0;
    return g;
}

}  // namespace

TEST_CASE("BertModel backward gives every parameter's gradient") {
    const BertConfig c = tiny_config();
    for (bool padded : {false, true}) {
        CAPTURE(padded);
        BertModel<double> model = tiny_model(c, 3);
        const Batch in(padded);
        check_parameters(model, Run{in, padded, {}});
    }
    INFO("largest relative difference " << worst);
    SUCCEED();
}

TEST_CASE("BertModel backward gives every parameter's gradient under a head_mask") {
    const BertConfig c = tiny_config();
    BertModel<double> model = tiny_model(c, 5);
    const Batch in(true);
    const Tensor<double> gates = some_gates(2, 4);
    HeadOptions<double> heads;
    heads.head_mask = gates;
    check_parameters(model, Run{in, true, heads});
    INFO("largest relative difference " << worst);
    SUCCEED();
}

TEST_CASE("BertModel backward gives a pruned model's every parameter's gradient") {
    BertModel<double> model = tiny_model(tiny_config(), 9);
    model.prune_heads({{0, {1, 3}}, {1, {2}}});
    const Batch in(true);
    check_parameters(model, Run{in, true, {}});
    INFO("largest relative difference " << worst);
    SUCCEED();
}

TEST_CASE("BertModel backward gives each head gate's gradient") {
    const BertConfig c = tiny_config();
    BertModel<double> model = tiny_model(c, 11);
    const Batch in(true);
    for (bool masked : {false, true}) {
        CAPTURE(masked);
        // At gates 1 without a head_mask (Michel et al.'s importance), at other gates with one.
        Tensor<double> gates = masked ? some_gates(2, 4) : Tensor<double>(Shape{2, 4});
        if (!masked) gates.matrix().setOnes();
        HeadOptions<double> heads;
        if (masked) heads.head_mask = gates;
        model.train();
        const BertForward<double> f =
            model.forward_train(in.ids, in.padding, in.types, heads, true);
        const BertGradients<double> g = model.backward(f, in.w);
        REQUIRE(g.head_mask.shape() == Shape{2, 4});
        REQUIRE(g.head_mask_per_example.size() == 2);
        // A second backward of the record gives the gates' gradients again, not twice them.
        const BertGradients<double> again = model.backward(f, in.w);
        for (Index i = 0; i < 8; ++i) CHECK(again.head_mask.data()[i] == g.head_mask.data()[i]);
        Compare cmp;
        model.eval();
        for (Index n = 0; n < 2; ++n) {
            const Tensor<double>& dg = g.head_mask_per_example[static_cast<std::size_t>(n)];
            REQUIRE(dg.shape() == Shape{2, 4});
            for (Index h = 0; h < 4; ++h) {
                Tensor<double> moved = gates;
                HeadOptions<double> at;
                at.head_mask = moved;
                moved(n, h) = gates(n, h) + kStep;
                const double up = Run{in, true, at}(model);
                moved(n, h) = gates(n, h) - kStep;
                const double down = Run{in, true, at}(model);
                CHECK(dg(0, h) + dg(1, h) == g.head_mask(n, h));  // the sum over the batch
                cmp.add(g.head_mask(n, h), (up - down) / (2 * kStep));
            }
        }
        CAPTURE(cmp.diff, cmp.scale);
        CHECK(cmp.scale > 0);
        CHECK(cmp.relative() < kRelative);
    }
}

TEST_CASE("BertModel gate gradients are each example's, and [H] gates take their sum") {
    const BertConfig c = tiny_config();
    BertModel<double> model = tiny_model(c, 13);
    const Batch in(true);
    model.train();
    const BertGradients<double> g =
        model.backward(model.forward_train(in.ids, in.padding, in.types, {}, true), in.w);
    // Example b alone: its row of the batch's gate gradients.
    for (Index b = 0; b < 2; ++b) {
        CAPTURE(b);
        Tensor<std::int64_t> ids(Shape{1, 6}), types(Shape{1, 6});
        Tensor<bool> padding(Shape{1, 6});
        Tensor<double> w(Shape{1, 6, 16});
        for (Index t = 0; t < 6; ++t) {
            ids(0, t) = in.ids(b, t);
            types(0, t) = in.types(b, t);
            padding(0, t) = in.padding(b, t);
            for (Index e = 0; e < 16; ++e) w(0, t, e) = in.w(b, t, e);
        }
        const BertGradients<double> one =
            model.backward(model.forward_train(ids, padding, types, {}, true), w);
        for (std::size_t n = 0; n < 2; ++n)
            for (Index h = 0; h < 4; ++h)
                CHECK(std::abs(one.head_mask_per_example[n](0, h) -
                               g.head_mask_per_example[n](b, h)) < 1e-12);
    }
    // A head_mask [H] gates every layer: its gradient is the sum over examples and layers.
    Tensor<double> gates(Shape{4}, {1.0, 0.5, 0.75, 1.25});
    HeadOptions<double> heads;
    heads.head_mask = gates;
    const BertGradients<double> shared =
        model.backward(model.forward_train(in.ids, in.padding, in.types, heads, true), in.w);
    model.eval();
    Compare cmp;
    for (Index h = 0; h < 4; ++h) {
        Tensor<double> moved = gates;
        HeadOptions<double> at;
        at.head_mask = moved;
        moved(h) = gates(h) + kStep;
        const double up = Run{in, true, at}(model);
        moved(h) = gates(h) - kStep;
        const double down = Run{in, true, at}(model);
        cmp.add(shared.head_mask(0, h) + shared.head_mask(1, h), (up - down) / (2 * kStep));
    }
    CAPTURE(cmp.diff, cmp.scale);
    CHECK(cmp.relative() < kRelative);
}

TEST_CASE("BertModel forward_train computes what forward computes") {
    const BertConfig c = tiny_config();
    BertModel<double> model = tiny_model(c, 17);
    const Batch in(true);
    HeadOptions<double> heads;
    heads.output_attentions = true;
    const auto want = model.forward(in.ids, in.padding, in.types, heads);
    for (bool training : {false, true}) {
        CAPTURE(training);
        model.train(training);
        const BertForward<double> f = model.forward_train(in.ids, in.padding, in.types, heads);
        CHECK(f.differentiable() == training);
        if (training) {  // without head_mask_grad: no gates' gradient
            const BertGradients<double> g = model.backward(f, in.w);
            CHECK(g.head_mask.numel() == 0);
            CHECK(g.head_mask_per_example.empty());
        }
        REQUIRE(f.last_hidden_state.shape() == want.last_hidden_state.shape());
        Compare cmp;
        for (Index i = 0; i < want.last_hidden_state.numel(); ++i)
            cmp.add(f.last_hidden_state.data()[i], want.last_hidden_state.data()[i]);
        CHECK(cmp.diff < 1e-13);
        REQUIRE(f.attentions.size() == 2);
        for (std::size_t n = 0; n < 2; ++n) {
            REQUIRE(f.attentions[n].shape() == want.attentions[n].shape());
            Compare a;
            for (Index i = 0; i < want.attentions[n].numel(); ++i)
                a.add(f.attentions[n].data()[i], want.attentions[n].data()[i]);
            CHECK(a.diff < 1e-13);
        }
    }
}

TEST_CASE("BertModel backward gives the same gradients under each projection") {
    BertModel<double> model = tiny_model(tiny_config(), 37);
    const Batch in(true);
    model.train();
    std::vector<Tensor<double>> want;
    Tensor<double> want_gates;
    for (Projection p : headwise::test::kProjections) {
        CAPTURE(static_cast<int>(p));
        model.with_projection(p);
        model.zero_grad();
        const BertGradients<double> g =
            model.backward(model.forward_train(in.ids, in.padding, in.types, {}, true), in.w);
        std::vector<Tensor<double>> grads;
        for (const Parameter<double>& q : model.parameters()) grads.emplace_back(q.grad);
        if (want.empty()) {
            want = grads;
            want_gates = g.head_mask;
            continue;
        }
        for (std::size_t k = 0; k < grads.size(); ++k) {
            Compare cmp;
            for (Index i = 0; i < grads[k].numel(); ++i)
                cmp.add(grads[k].data()[i], want[k].data()[i]);
            CHECK(cmp.diff < 1e-12);
        }
        Compare gates;
        for (Index i = 0; i < want_gates.numel(); ++i)
            gates.add(g.head_mask.data()[i], want_gates.data()[i]);
        CHECK(gates.diff < 1e-12);
    }
}

TEST_CASE("BertModel backward of unbatched ids equals that of a batch of one") {
    const BertConfig c = tiny_config();
    BertModel<double> model = tiny_model(c, 19);
    model.train();
    const Tensor<std::int64_t> ids(Shape{5}, {2, 9, 4, 17, 3}),
        batched(Shape{1, 5}, {2, 9, 4, 17, 3});
    Tensor<double> w(Shape{5, 16});
    for (Index i = 0; i < w.numel(); ++i) w.data()[i] = 0.01 * static_cast<double>(i % 13) - 0.05;
    const BertForward<double> f = model.forward_train(ids, {}, {}, {}, true);
    CHECK(f.last_hidden_state.shape() == Shape{5, 16});
    const BertGradients<double> g = model.backward(f, w);
    const auto grads = [&] {
        std::vector<Tensor<double>> out;
        for (const Parameter<double>& p : model.parameters()) out.emplace_back(p.grad);
        return out;
    };
    const std::vector<Tensor<double>> one = grads();
    model.zero_grad();
    const BertGradients<double> gb =
        model.backward(model.forward_train(batched, {}, {}, {}, true), w.reshape(Shape{1, 5, 16}));
    const std::vector<Tensor<double>> two = grads();
    CHECK(g.inputs_embeds.shape() == Shape{5, 16});
    CHECK(gb.inputs_embeds.shape() == Shape{1, 5, 16});
    for (std::size_t k = 0; k < one.size(); ++k) {
        Compare cmp;
        for (Index i = 0; i < one[k].numel(); ++i) cmp.add(one[k].data()[i], two[k].data()[i]);
        CHECK(cmp.diff == 0.0);
    }
    for (std::size_t n = 0; n < 2; ++n) {
        CHECK(g.head_mask_per_example[n].shape() == Shape{1, 4});
        for (Index h = 0; h < 4; ++h)
            CHECK(g.head_mask_per_example[n](0, h) == gb.head_mask_per_example[n](0, h));
    }
    // The summed embeddings' gradient is what the position table's rows received.
    for (const Parameter<double>& p : model.parameters())
        if (p.name == "embeddings.position_embeddings.weight")
            for (Index t = 0; t < 5; ++t)
                for (Index e = 0; e < 16; ++e)
                    CHECK(p.grad.data()[t * 16 + e] == gb.inputs_embeds(0, t, e));
}

TEST_CASE("BertModel pruned gradients equal the unpruned model's with those heads gated to 0") {
    const BertConfig c = tiny_config();
    BertModel<double> full = tiny_model(c, 23);
    BertModel<double> pruned = full;
    const HeadsToPrune heads{{0, {1, 3}}, {1, {2}}};
    pruned.prune_heads(heads);
    Tensor<double> gates(Shape{2, 4});
    gates.matrix().setOnes();
    gates(0, 1) = gates(0, 3) = gates(1, 2) = 0.0;
    const Batch in(true);
    HeadOptions<double> gated;
    gated.head_mask = gates;
    full.train();
    pruned.train();
    const BertForward<double> ff = full.forward_train(in.ids, in.padding, in.types, gated, true);
    const BertForward<double> fp = pruned.forward_train(in.ids, in.padding, in.types, {}, true);
    Compare out;
    for (Index i = 0; i < ff.last_hidden_state.numel(); ++i)
        out.add(fp.last_hidden_state.data()[i], ff.last_hidden_state.data()[i]);
    CHECK(out.diff < kPruned);
    const BertGradients<double> gf = full.backward(ff, in.w);
    const BertGradients<double> gp = pruned.backward(fp, in.w);

    // The heads each layer keeps, in order, and D = 4 features each.
    const std::map<Index, std::vector<Index>> kept{{0, {0, 2}}, {1, {0, 1, 3}}};
    const Index D = 4, E = 16;
    std::map<std::string, Tensor<double>> want;
    for (const Parameter<double>& p : full.parameters()) want.emplace(p.name, p.grad);
    for (const Parameter<double>& p : pruned.parameters()) {
        CAPTURE(p.name);
        const Tensor<double>& a = want.at(p.name);
        Compare cmp;
        const std::string layer = p.name.size() > 14 ? p.name.substr(14, 1) : "";
        const bool in_proj = p.name.find("attention.self.") != std::string::npos;
        const bool out_proj_weight =
            p.name.find("attention.output.dense.weight") != std::string::npos;
        if (in_proj || out_proj_weight) {
            const std::vector<Index>& ks = kept.at(std::stoi(layer));
            REQUIRE(p.grad.numel() == a.numel() * static_cast<Index>(ks.size()) / 4);
            const Index cols = p.grad.rank() == 2 ? p.grad.size(1) : 1;
            for (std::size_t k = 0; k < ks.size(); ++k)
                for (Index d = 0; d < D; ++d) {
                    const Index row = static_cast<Index>(k) * D + d, full_row = ks[k] * D + d;
                    if (in_proj) {
                        for (Index j = 0; j < cols; ++j)
                            cmp.add(p.grad.data()[row * cols + j], a.data()[full_row * cols + j]);
                    } else {  // out_proj.weight [E, H D]: columns
                        const Index hd = p.grad.size(1);
                        for (Index e = 0; e < E; ++e)
                            cmp.add(p.grad.data()[e * hd + row], a.data()[e * 16 + full_row]);
                    }
                }
        } else {
            REQUIRE(p.grad.shape() == a.shape());
            for (Index i = 0; i < a.numel(); ++i) cmp.add(p.grad.data()[i], a.data()[i]);
        }
        CAPTURE(cmp.diff, cmp.scale);
        if (p.name.find("attention.self.key.bias") == std::string::npos) CHECK(cmp.scale > 0);
        CHECK(cmp.diff < kPruned);
    }
    // The gates of the heads that remain.
    for (Index n = 0; n < 2; ++n) {
        const std::vector<Index>& ks = kept.at(n);
        const Tensor<double>& dp = gp.head_mask_per_example[static_cast<std::size_t>(n)];
        REQUIRE(dp.shape() == Shape{2, static_cast<Index>(ks.size())});
        for (Index b = 0; b < 2; ++b)
            for (std::size_t k = 0; k < ks.size(); ++k)
                CHECK(std::abs(dp(b, static_cast<Index>(k)) -
                               gf.head_mask_per_example[static_cast<std::size_t>(n)](b, ks[k])) <
                      kPruned);
    }
    Compare emb;
    for (Index i = 0; i < gf.inputs_embeds.numel(); ++i)
        emb.add(gp.inputs_embeds.data()[i], gf.inputs_embeds.data()[i]);
    CHECK(emb.diff < kPruned);
    // [N, H] needs equal head counts: the pruned model's layers keep 2 and 3.
    CHECK(gf.head_mask.shape() == Shape{2, 4});
    CHECK(gp.head_mask.numel() == 0);
}

TEST_CASE("BertModel backward refuses records and gradients it cannot use") {
    const BertConfig c = tiny_config();
    BertModel<double> model = tiny_model(c, 29);
    const Batch in(false);
    const std::string fn = "headwise::models::BertModel::backward: ";
    const auto zero_grads = [&] {
        for (const Parameter<double>& p : model.parameters())
            for (Index i = 0; i < p.grad.numel(); ++i)
                if (p.grad.data()[i] != 0.0) return false;
        return true;
    };
    model.zero_grad();

    // A record of an eval-mode forward (a model starts in eval mode).
    const BertForward<double> eval = model.forward_train(in.ids, {}, in.types);
    CHECK_FALSE(eval.differentiable());
    CHECK_THROWS_MATCHES(model.backward(eval, in.w), std::invalid_argument,
                         Catch::Matchers::Message(
                             fn + "fwd: comes from a forward in eval mode, which saves nothing for "
                                  "backward; call train() before forward_train"));

    model.train();
    const BertForward<double> f = model.forward_train(in.ids, {}, in.types);
    // A gradient of another shape.
    const Tensor<double> wrong(Shape{2, 6, 15});
    CHECK_THROWS_MATCHES(
        model.backward(f, wrong), headwise::shape_error,
        Catch::Matchers::Message(fn + "grad_output: expected shape [2, 6, 16], got [2, 6, 15]"));
    // A record of another model: a copy is another model.
    BertModel<double> copy = model;
    CHECK_THROWS_MATCHES(
        copy.backward(f, in.w), std::invalid_argument,
        Catch::Matchers::Message(fn + "fwd: comes from another model's forward_train (a copy of a "
                                      "model is another model); pass a result of this model's "
                                      "forward_train"));
    CHECK(zero_grads());
    // A record from before prune_heads.
    {
        BertModel<double> other = model;
        const BertForward<double> before = other.forward_train(in.ids, {}, in.types);
        other.prune_heads({{1, {0}}});
        CHECK_THROWS_MATCHES(other.backward(before, in.w), std::invalid_argument,
                             Catch::Matchers::Message(
                                 fn + "fwd: comes from a forward before prune_heads: layer 1 had "
                                      "4 heads, now 3"));
    }
    // A moved model keeps its records.
    BertModel<double> moved = std::move(model);
    CHECK_NOTHROW(moved.backward(f, in.w));

    // The layer alone: another layer's record.
    headwise::models::BertLayer<double>& l0 = moved.layers()[0];
    headwise::models::BertLayer<double>& l1 = moved.layers()[1];
    Tensor<double> x(Shape{2, 6, 16});
    for (Index i = 0; i < x.numel(); ++i) x.data()[i] = 0.1 * static_cast<double>(i % 7);
    const auto r0 = l0.forward_train(x, {});
    CHECK_THROWS_MATCHES(
        l1.backward(r0, x), std::invalid_argument,
        Catch::Matchers::Message("headwise::models::BertLayer::backward: fwd: comes from another "
                                 "layer's forward (a copy of a layer is another layer); pass a "
                                 "result of this layer's forward"));
}

TEST_CASE("BertModel backward refuses released float weights") {
    BertConfig c = tiny_config();
    BertModel<float> model(c, Projection::fused, 31);
    model.with_precision(headwise::Precision::bf16, headwise::FloatWeights::release);
    model.train();
    const Batch in(false);
    const BertForward<float> f = model.forward_train(in.ids, {}, in.types);
    Tensor<float> w(Shape{2, 6, 16});
    CHECK_THROWS_MATCHES(
        model.backward(f, w), std::logic_error,
        Catch::Matchers::Message(
            "headwise::models::BertModel::backward: the float weights were released by "
            "with_precision(Precision::bf16, FloatWeights::release); backward needs the float "
            "weights (the model is inference-only) (with_precision(Precision::float32) brings "
            "them back, widened from bf16)"));
}

namespace {

// Values [n] from a fixed normal stream.
Tensor<double> normal_tensor(const Shape& shape, std::uint64_t seed) {
    Tensor<double> t(shape);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (Index i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
    return t;
}

}  // namespace

TEST_CASE("pool_backward and l2_normalize_rows_backward against central differences") {
    const Tensor<double> hidden = normal_tensor(Shape{2, 5, 3}, 41);
    Tensor<bool> padding(Shape{2, 5});
    padding(1, 3) = padding(1, 4) = true;
    const Tensor<double> d = normal_tensor(Shape{2, 3}, 43);
    for (Pooling mode : {Pooling::mean, Pooling::cls, Pooling::max}) {
        CAPTURE(static_cast<int>(mode));
        const Tensor<double> dh = headwise::models::pool_backward<double>(hidden, padding, mode, d);
        REQUIRE(dh.shape() == hidden.shape());
        Compare cmp;
        for (Index i = 0; i < hidden.numel(); ++i) {
            Tensor<double> moved = hidden;
            moved.data()[i] = hidden.data()[i] + kStep;
            const double up = loss(headwise::models::pool<double>(moved, padding, mode), d);
            moved.data()[i] = hidden.data()[i] - kStep;
            const double down = loss(headwise::models::pool<double>(moved, padding, mode), d);
            cmp.add(dh.data()[i], (up - down) / (2 * kStep));
        }
        CAPTURE(cmp.diff, cmp.scale);
        CHECK(cmp.relative() < kRelative);
        for (Index t = 3; t < 5; ++t)  // padding takes nothing
            for (Index e = 0; e < 3; ++e) CHECK(dh(1, t, e) == 0.0);
    }
    const Tensor<double> x = normal_tensor(Shape{3, 4}, 47), dy = normal_tensor(Shape{3, 4}, 53);
    const Tensor<double> dx = headwise::models::l2_normalize_rows_backward<double>(x, dy);
    const auto normalized = [](Tensor<double> v) {
        headwise::models::l2_normalize_rows<double>(v);
        return v;
    };
    Compare cmp;
    for (Index i = 0; i < x.numel(); ++i) {
        Tensor<double> moved = x;
        moved.data()[i] = x.data()[i] + kStep;
        const double up = loss(normalized(moved), dy);
        moved.data()[i] = x.data()[i] - kStep;
        const double down = loss(normalized(moved), dy);
        cmp.add(dx.data()[i], (up - down) / (2 * kStep));
    }
    CAPTURE(cmp.diff, cmp.scale);
    CHECK(cmp.relative() < kRelative);
    const std::string fn = "headwise::models::";
    CHECK_THROWS_MATCHES(
        headwise::models::pool_backward<double>(hidden, padding, Pooling::mean, dy),
        headwise::shape_error,
        Catch::Matchers::Message(fn +
                                 "pool_backward: d_pooled: expected shape [2, 3], got [3, 4]"));
    CHECK_THROWS_MATCHES(
        headwise::models::l2_normalize_rows_backward<double>(x, d), headwise::shape_error,
        Catch::Matchers::Message(
            fn + "l2_normalize_rows_backward: dy: expected shape [3, 4], got [2, 3]"));
}

TEST_CASE("BertModel head gates' gradient of a loss over mean-pooled normalised embeddings") {
    BertModel<double> model = tiny_model(tiny_config(), 59);
    const Batch in(true);
    const Tensor<double> v = normal_tensor(Shape{2, 16}, 61);  // the loss sum(v ⊙ embedding)
    const auto embedding_loss = [&](const HeadOptions<double>& heads) {
        Tensor<double> e = headwise::models::pool<double>(
            model.forward(in.ids, in.padding, in.types, heads).last_hidden_state, in.padding,
            Pooling::mean);
        headwise::models::l2_normalize_rows<double>(e);
        return loss(e, v);
    };
    model.train();
    const BertForward<double> f = model.forward_train(in.ids, in.padding, in.types, {}, true);
    const Tensor<double> pooled =
        headwise::models::pool<double>(f.last_hidden_state, in.padding, Pooling::mean);
    const Tensor<double> d_pooled = headwise::models::l2_normalize_rows_backward<double>(pooled, v);
    const Tensor<double> d_hidden = headwise::models::pool_backward<double>(
        f.last_hidden_state, in.padding, Pooling::mean, d_pooled);
    const BertGradients<double> g = model.backward(f, d_hidden);
    model.eval();
    REQUIRE(g.head_mask.shape() == Shape{2, 4});
    Compare cmp;
    for (Index n = 0; n < 2; ++n)
        for (Index h = 0; h < 4; ++h) {
            Tensor<double> gates(Shape{2, 4});
            gates.matrix().setOnes();
            HeadOptions<double> at;
            at.head_mask = gates;
            gates(n, h) = 1 + kStep;
            const double up = embedding_loss(at);
            gates(n, h) = 1 - kStep;
            const double down = embedding_loss(at);
            cmp.add(g.head_mask(n, h), (up - down) / (2 * kStep));
        }
    CAPTURE(cmp.diff, cmp.scale);
    CHECK(cmp.scale > 0);
    CHECK(cmp.relative() < kRelative);
}

}  // namespace test_bert_backward
