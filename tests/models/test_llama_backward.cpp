// SPDX-License-Identifier: MIT
// LlamaDecoderLayer, LlamaModel and LlamaForCausalLM backward: every parameter's gradient and the
// head gates' against central differences of a cross-entropy loss in double, pruned heads
// against heads masked to 0, and the errors of backward.

#include <headwise/losses/cross_entropy.hpp>
#include <headwise/models/llama.hpp>

#include <algorithm>   // std::max
#include <cmath>       // std::abs
#include <cstdint>     // std::int64_t, std::uint64_t
#include <functional>  // std::function
#include <random>      // std::mt19937_64
#include <stdexcept>   // std::invalid_argument, std::logic_error
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"

namespace test_llama_backward {

using headwise::AttentionMasks;
using headwise::Index;
using headwise::Parameter;
using headwise::Projection;
using headwise::Shape;
using headwise::StateDict;
using headwise::Tensor;
using headwise::TensorView;
using headwise::models::HeadOptions;
using headwise::models::HeadsToPrune;
using headwise::models::LlamaConfig;
using headwise::models::LlamaForCausalLM;
using headwise::models::LlamaModelGradients;

namespace {

// The central difference's step: its truncation error (h^2 f''' / 6) and its rounding error
// (1e-16 |f| / h) together stay below 3e-8 of the largest gradient entry of each tensor here
// (1e-5 gave up to 9e-8, truncation dominating in the 3-layer model).
constexpr double kStep = 1e-6;
// Analytic against central differences, max |fd - analytic| / max |analytic| per tensor.
constexpr double kGradTolerance = 1e-7;

struct Variant {
    const char* name;
    Index head_dim;  // 0: hidden_size / heads
    Index kv_heads;  // grouped-query when < 4
    bool tied;       // tie_word_embeddings
    bool qwen2;      // q/k/v biases, none on o_proj (Qwen2)
    bool mlp_bias;
    Index layers;
};

LlamaConfig config_of(const Variant& v) {
    LlamaConfig c;
    c.vocab_size = 11;
    c.hidden_size = 16;
    c.intermediate_size = 12;
    c.num_hidden_layers = v.layers;
    c.num_attention_heads = 4;
    c.num_key_value_heads = v.kv_heads;
    c.head_dim = v.head_dim;
    c.max_position_embeddings = 32;
    c.rms_norm_eps = 1e-6;
    c.tie_word_embeddings = v.tied;
    if (v.qwen2) {
        c.model_type = "qwen2";
        c.attention_bias = true;
        c.o_proj_bias = false;
    }
    c.mlp_bias = v.mlp_bias;
    return c;
}

// A causal LM with random weights (N(0, 0.5^2); the norms' weights near 1), in training mode.
LlamaForCausalLM<double> random_model(const LlamaConfig& c, std::uint64_t seed) {
    LlamaForCausalLM<double> m(c, Projection::fused, headwise::uninitialized);
    std::mt19937_64 rng(seed);
    StateDict<double> sd = m.state_dict();
    for (auto& [name, t] : sd) {
        t = Tensor<double>::randn(t.shape(), rng);
        const bool norm = name.find("norm") != std::string::npos;
        for (Index i = 0; i < t.numel(); ++i)
            t.data()[i] = norm ? 1.0 + 0.1 * t.data()[i] : 0.5 * t.data()[i];
    }
    m.load_pretrained(sd);
    m.train();
    return m;
}

// Input ids [2, 6] and targets (the next id), the second sequence padded after 4 tokens when
// `padded` (its padding positions' targets ignored).
struct Batch {
    Tensor<std::int64_t> ids{Shape{2, 6}, {1, 5, 9, 3, 2, 7, 4, 10, 0, 6, 8, 8}};
    Tensor<bool> padding;
    Tensor<std::int64_t> targets{Shape{12}, {5, 9, 3, 2, 7, 1, 10, 0, 6, 2, 4, 4}};
    explicit Batch(bool padded) {
        if (!padded) return;
        padding = Tensor<bool>(Shape{2, 6});
        for (Index t = 4; t < 6; ++t) {
            padding(1, t) = true;
            targets.data()[6 + t] = -100;
        }
    }
    TensorView<const bool> pad() const { return padding.view(); }
};

// Mean cross-entropy of the logits against the batch's targets, and its gradient [B, L, V].
headwise::LossResult<double> loss_of(const Tensor<double>& logits, const Batch& batch) {
    const Index V = logits.shape().back();
    headwise::LossResult<double> r = headwise::cross_entropy<double>(
        logits.view().reshape(Shape{logits.numel() / V, V}), batch.targets);
    r.grad = std::move(r.grad).reshape(logits.shape());
    return r;
}

double loss_value(LlamaForCausalLM<double>& m, const Batch& batch,
                  TensorView<const double> head_mask = {}) {
    HeadOptions<double> heads;
    heads.head_mask = head_mask;
    return loss_of(m.forward_train(batch.ids, batch.pad(), heads).logits, batch).value;
}

// One forward_train and backward of the loss: the parameter gradients left in the model (zeroed
// first), the returned gradients.
LlamaModelGradients<double> gradients(LlamaForCausalLM<double>& m, const Batch& batch,
                                      TensorView<const double> head_mask = {},
                                      bool head_mask_grad = true) {
    m.zero_grad();
    HeadOptions<double> heads;
    heads.head_mask = head_mask;
    const auto f = m.forward_train(batch.ids, batch.pad(), heads, head_mask_grad);
    const headwise::LossResult<double> l = loss_of(f.logits, batch);
    return m.backward(f, l.grad);
}

// max |a - b| / max |b| (max |a - b| when b is zero), and where the largest difference is.
struct Compared {
    double error = 0;
    Index worst = -1;
};
Compared compare(const double* a, const double* b, Index n) {
    Compared c;
    double diff = 0, scale = 0;
    for (Index i = 0; i < n; ++i) {
        const double d = std::abs(a[i] - b[i]);
        if (d > diff) {
            diff = d;
            c.worst = i;
        }
        scale = std::max(scale, std::abs(b[i]));
    }
    c.error = scale == 0 ? diff : diff / scale;
    return c;
}

// Central differences of the loss over every entry of `values` (a parameter's or the gates').
Tensor<double> central_differences(TensorView<double> values, const std::function<double()>& f) {
    Tensor<double> fd(values.shape());
    for (Index i = 0; i < values.numel(); ++i) {
        double& v = values.data()[i];
        const double kept = v;
        v = kept + kStep;
        const double plus = f();
        v = kept - kStep;
        const double minus = f();
        v = kept;
        fd.data()[i] = (plus - minus) / (2 * kStep);
    }
    return fd;
}

// Every parameter's gradient against central differences; returns the largest error.
double check_every_parameter(LlamaForCausalLM<double>& m, const Batch& batch) {
    gradients(m, batch, {}, false);
    const StateDict<double> analytic = m.grad_dict();
    double worst = 0;
    for (Parameter<double>& p : m.parameters()) {
        const Tensor<double> fd =
            central_differences(p.value, [&] { return loss_value(m, batch); });
        const Tensor<double>& g = analytic.at(p.name);
        const Compared c = compare(fd.data(), g.data(), g.numel());
        CAPTURE(p.name, c.error, c.worst, fd.data()[c.worst], g.data()[c.worst]);
        CHECK(c.error <= kGradTolerance);
        worst = std::max(worst, c.error);
    }
    return worst;
}

template <class E, class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "(no exception of the expected type)";
}

}  // namespace

TEST_CASE("forward_train gives the inference forward's logits") {
    const Variant v{"gqa", 0, 2, false, true, false, 2};
    LlamaForCausalLM<double> m = random_model(config_of(v), 3);
    const Batch batch(true);
    const Tensor<double> trained = m.forward_train(batch.ids, batch.pad()).logits;  // [2, 6, V]
    m.eval();
    const Tensor<double> inferred = m.forward(batch.ids, batch.pad());
    const Tensor<double> evaluated = m.forward_train(batch.ids, batch.pad()).logits;
    REQUIRE(trained.shape() == Shape{2, 6, 11});
    // Right padding: the real tokens' rows (padding rows are not meaningful).
    for (Index b = 0; b < 2; ++b)
        for (Index t = 0; t < (b == 0 ? 6 : 4); ++t)
            for (Index k = 0; k < 11; ++k) {
                CAPTURE(b, t, k);
                CHECK(std::abs(trained(b, t, k) - inferred(b, t, k)) <= 1e-12);
                CHECK(trained(b, t, k) == evaluated(b, t, k));
            }
    CHECK_FALSE(m.forward_train(batch.ids).differentiable());
}

TEST_CASE("every parameter's gradient matches central differences") {
    const Variant v =
        GENERATE(Variant{"gqa, head_dim E / H, untied", 0, 2, false, false, false, 2},
                 Variant{"gqa, head_dim 6, tied, qwen2 biases", 6, 2, true, true, false, 2},
                 Variant{"mha, tied, mlp bias, 3 layers", 0, 4, true, false, true, 3},
                 Variant{"one kv head, head_dim 2, untied, qwen2", 2, 1, false, true, false, 2});
    const bool padded = GENERATE(false, true);
    CAPTURE(v.name, padded);
    LlamaForCausalLM<double> m = random_model(config_of(v), 11);
    const Batch batch(padded);
    const double worst = check_every_parameter(m, batch);
    CAPTURE(worst);
    SUCCEED("largest relative error " << worst);
}

TEST_CASE("unbatched ids and a sum of weighted logits") {
    // logits [L, V] of ids [L], loss sum(w ⊙ logits): backward's grad_logits is w itself.
    const Variant v{"gqa, tied", 0, 2, true, false, false, 2};
    LlamaForCausalLM<double> m = random_model(config_of(v), 5);
    const Tensor<std::int64_t> ids(Shape{5}, {3, 1, 4, 1, 5});
    std::mt19937_64 rng(9);
    const Tensor<double> w = Tensor<double>::randn(Shape{5, 11}, rng);
    const auto loss = [&] {
        const Tensor<double> logits = m.forward_train(ids).logits;
        double sum = 0;
        for (Index i = 0; i < logits.numel(); ++i) sum += w.data()[i] * logits.data()[i];
        return sum;
    };
    m.zero_grad();
    const auto f = m.forward_train(ids);
    REQUIRE(f.logits.shape() == Shape{5, 11});
    const LlamaModelGradients<double> g = m.backward(f, w);
    CHECK(g.inputs_embeds.shape() == Shape{5, 16});
    CHECK(g.head_mask.numel() == 0);
    const StateDict<double> analytic = m.grad_dict();
    for (Parameter<double>& p : m.parameters()) {
        const Tensor<double> fd = central_differences(p.value, loss);
        const Compared c = compare(fd.data(), analytic.at(p.name).data(), fd.numel());
        CAPTURE(p.name, c.error, c.worst);
        CHECK(c.error <= kGradTolerance);
    }
}

TEST_CASE("the head gates' gradient matches central differences") {
    const Variant v = GENERATE(Variant{"gqa", 0, 2, false, true, false, 3},
                               Variant{"head_dim 6, tied", 6, 2, true, false, false, 2});
    const bool padded = GENERATE(false, true);
    CAPTURE(v.name, padded);
    LlamaForCausalLM<double> m = random_model(config_of(v), 21);
    const Batch batch(padded);
    const Index N = v.layers, H = 4;

    SECTION("at gates other than 1, [N, H]") {
        Tensor<double> xi(Shape{N, H});
        for (Index i = 0; i < N * H; ++i) xi.data()[i] = 0.6 + 0.1 * static_cast<double>(i % 7);
        const LlamaModelGradients<double> g = gradients(m, batch, xi);
        REQUIRE(g.head_mask.shape() == Shape{N, H});
        const Tensor<double> fd =
            central_differences(xi.view(), [&] { return loss_value(m, batch, xi); });
        const Compared c = compare(fd.data(), g.head_mask.data(), N * H);
        CAPTURE(c.error, c.worst);
        CHECK(c.error <= kGradTolerance);
    }
    SECTION("at xi = 1 without a head_mask (Michel et al.'s importance)") {
        const LlamaModelGradients<double> g = gradients(m, batch);
        REQUIRE(g.head_mask.shape() == Shape{N, H});
        Tensor<double> ones(Shape{N, H});
        ones.fill(1.0);
        const Tensor<double> fd =
            central_differences(ones.view(), [&] { return loss_value(m, batch, ones); });
        const Compared c = compare(fd.data(), g.head_mask.data(), N * H);
        CAPTURE(c.error, c.worst);
        CHECK(c.error <= kGradTolerance);
        // The parameter gradients are those of a backward without the gates' gradient.
        const StateDict<double> with = m.grad_dict();
        gradients(m, batch, {}, false);
        for (const auto& [name, t] : m.grad_dict()) {
            CAPTURE(name);
            CHECK(compare(t.data(), with.at(name).data(), t.numel()).error == 0.0);
        }
    }
    SECTION("a head_mask [H] shared by the layers: its gradient is the sum over layers") {
        Tensor<double> xi(Shape{H}, {0.9, 1.2, 0.7, 1.1});
        const LlamaModelGradients<double> g = gradients(m, batch, xi);
        REQUIRE(g.head_mask.shape() == Shape{N, H});
        Tensor<double> summed(Shape{H});
        for (Index n = 0; n < N; ++n)
            for (Index h = 0; h < H; ++h) summed.data()[h] += g.head_mask(n, h);
        const Tensor<double> fd =
            central_differences(xi.view(), [&] { return loss_value(m, batch, xi); });
        const Compared c = compare(fd.data(), summed.data(), H);
        CAPTURE(c.error, c.worst);
        CHECK(c.error <= kGradTolerance);
    }
    SECTION("a second backward of one record gives the same gates' gradient") {
        HeadOptions<double> heads;
        const auto f = m.forward_train(batch.ids, batch.pad(), heads, true);
        const headwise::LossResult<double> l = loss_of(f.logits, batch);
        const Tensor<double> first = m.backward(f, l.grad).head_mask;
        const Tensor<double> second = m.backward(f, l.grad).head_mask;
        CHECK(compare(second.data(), first.data(), N * H).error == 0.0);
    }
}

TEST_CASE("a pruned model's gradients are the unpruned model's with those heads masked to 0") {
    const Variant v = GENERATE(Variant{"gqa: a whole group per layer", 0, 2, false, true, false, 2},
                               Variant{"mha, head_dim 6, tied", 6, 4, true, false, false, 2});
    const bool padded = GENERATE(false, true);
    CAPTURE(v.name, padded);
    const LlamaConfig c = config_of(v);
    // Two heads from each layer (with grouped-query attention, one whole group).
    const HeadsToPrune heads = v.kv_heads == 2 ? HeadsToPrune{{0, {0, 1}}, {1, {2, 3}}}
                                               : HeadsToPrune{{0, {1, 2}}, {1, {0, 3}}};
    const Batch batch(padded);
    LlamaForCausalLM<double> masked = random_model(c, 31);
    Tensor<double> xi(Shape{2, 4});
    xi.fill(1.0);
    for (const auto& [layer, list] : heads)
        for (Index h : list) xi(layer, h) = 0.0;
    const LlamaModelGradients<double> gm = gradients(masked, batch, xi);

    LlamaForCausalLM<double> pruned = random_model(c, 31);
    pruned.prune_heads(heads);
    const LlamaModelGradients<double> gp = gradients(pruned, batch);
    // prune_heads cuts the gradients with the weights: what remains, name by name.
    masked.prune_heads(heads);
    const StateDict<double> want = masked.grad_dict();
    const StateDict<double> got = pruned.grad_dict();
    REQUIRE(got.size() == want.size());
    for (const auto& [name, t] : want) {
        REQUIRE(got.count(name) == 1);
        REQUIRE(got.at(name).shape() == t.shape());
        const Compared cmp = compare(got.at(name).data(), t.data(), t.numel());
        CAPTURE(name, cmp.error, cmp.worst);
        CHECK(cmp.error <= 1e-12);
    }
    const Compared e =
        compare(gp.inputs_embeds.data(), gm.inputs_embeds.data(), gm.inputs_embeds.numel());
    CHECK(e.error <= 1e-12);
    // The gates of the heads that stay.
    REQUIRE(gp.head_mask.shape() == Shape{2, 2});
    for (const auto& [layer, list] : heads) {
        Index kept = 0;
        for (Index h = 0; h < 4; ++h) {
            if (xi(layer, h) == 0.0) continue;
            CAPTURE(layer, h);
            CHECK(std::abs(gp.head_mask(layer, kept) - gm.head_mask(layer, h)) <=
                  1e-12 * std::max(1.0, std::abs(gm.head_mask(layer, h))));
            ++kept;
        }
    }
}

TEST_CASE("a decoder layer alone: backward against central differences") {
    const Variant v{"gqa, qwen2", 6, 2, false, true, false, 1};
    LlamaForCausalLM<double> m = random_model(config_of(v), 41);
    headwise::models::LlamaDecoderLayer<double>& layer = m.model().layers()[0];
    std::mt19937_64 rng(43);
    Tensor<double> x = Tensor<double>::randn(Shape{2, 5, 16}, rng);
    const Tensor<double> w = Tensor<double>::randn(Shape{2, 5, 16}, rng);
    AttentionMasks<double> masks;
    masks.key_padding_mask = Tensor<bool>(Shape{2, 5});
    masks.key_padding_mask(1, 4) = true;
    const auto loss = [&] {
        const Tensor<double> y = layer.forward(x, masks).output;
        double sum = 0;
        for (Index i = 0; i < y.numel(); ++i) sum += w.data()[i] * y.data()[i];
        return sum;
    };
    layer.zero_grad();
    const auto f = layer.forward(x, masks);
    const Tensor<double> dx = layer.backward(f, w);
    const Tensor<double> fd = central_differences(x.view(), loss);
    const Compared c = compare(fd.data(), dx.data(), dx.numel());
    CAPTURE(c.error, c.worst);
    CHECK(c.error <= kGradTolerance);
    const StateDict<double> analytic = layer.grad_dict();
    for (Parameter<double>& p : layer.parameters()) {
        const Tensor<double> fdp = central_differences(p.value, loss);
        const Compared cp = compare(fdp.data(), analytic.at(p.name).data(), fdp.numel());
        CAPTURE(p.name, cp.error, cp.worst);
        CHECK(cp.error <= kGradTolerance);
    }
}

TEST_CASE("backward refuses records it cannot differentiate, before anything changes") {
    const Variant v{"gqa", 0, 2, false, false, false, 2};
    LlamaForCausalLM<double> m = random_model(config_of(v), 51);
    const Batch batch(false);
    m.zero_grad();
    const auto all_zero = [&] {
        for (const auto& [name, t] : m.grad_dict())
            for (Index i = 0; i < t.numel(); ++i)
                if (t.data()[i] != 0.0) return false;
        return true;
    };
    Tensor<double> dlogits(Shape{2, 6, 11});
    dlogits.fill(0.5);

    SECTION("a forward in eval mode") {
        m.eval();
        const auto f = m.forward_train(batch.ids);
        m.train();
        CHECK_FALSE(f.differentiable());
        CHECK(message_of<std::invalid_argument>([&] { m.backward(f, dlogits); }) ==
              "headwise::models::LlamaForCausalLM::backward: fwd: comes from a forward in eval "
              "mode, which saves nothing for backward; call train() before forward_train");
        const auto body = m.model().forward_train(batch.ids);
        m.eval();
        const auto eval_body = m.model().forward_train(batch.ids);
        CHECK(message_of<std::invalid_argument>(
                  [&] { m.model().backward(eval_body, body.last_hidden_state); }) ==
              "headwise::models::LlamaModel::backward: fwd: comes from a forward in eval "
              "mode, which saves nothing for backward; call train() before forward_train");
    }
    SECTION("a layer left in eval mode inside a training model") {
        m.model().layers()[1].eval();
        const auto f = m.forward_train(batch.ids);
        CHECK(message_of<std::invalid_argument>([&] { m.backward(f, dlogits); }) ==
              "headwise::models::LlamaForCausalLM::backward: fwd.layers[1]: comes from a forward "
              "in eval mode, which saves nothing for backward; call train() before forward");
    }
    SECTION("another model's record") {
        LlamaForCausalLM<double> other = random_model(config_of(v), 51);
        const auto f = other.forward_train(batch.ids);
        CHECK(message_of<std::invalid_argument>([&] { m.backward(f, dlogits); }) ==
              "headwise::models::LlamaForCausalLM::backward: fwd: comes from another model's "
              "forward_train (a copy of a model is another model); pass a result of this "
              "model's forward_train");
        const auto body = other.model().forward_train(batch.ids);
        CHECK(message_of<std::invalid_argument>(
                  [&] { m.model().backward(body, body.last_hidden_state); }) ==
              "headwise::models::LlamaModel::backward: fwd: comes from another model's "
              "forward_train (a copy of a model is another model); pass a result of this "
              "model's forward_train");
        const auto layer_f = other.model().layers()[0].forward(body.last_hidden_state);
        CHECK(message_of<std::invalid_argument>(
                  [&] { m.model().layers()[0].backward(layer_f, layer_f.output); }) ==
              "headwise::models::LlamaDecoderLayer::backward: fwd: comes from another "
              "layer's forward (a copy of a layer is another layer); pass a result of this "
              "layer's forward");
    }
    SECTION("grad_logits of the wrong shape") {
        const auto f = m.forward_train(batch.ids);
        const Tensor<double> wrong(Shape{2, 6, 10});
        CHECK(message_of<headwise::shape_error>([&] { m.backward(f, wrong); }) ==
              "headwise::models::LlamaForCausalLM::backward: grad_logits: expected shape "
              "[2, 6, 11], got [2, 6, 10]");
        const auto body = m.model().forward_train(batch.ids.view().reshape(Shape{12}));
        CHECK(message_of<headwise::shape_error>([&] {
                  m.model().backward(body, Tensor<double>(Shape{2, 6, 16}));
              }) ==
              "headwise::models::LlamaModel::backward: grad_output: expected shape "
              "[12, 16], got [2, 6, 16]");
    }
    SECTION("a record taken before prune_heads") {
        const auto f = m.forward_train(batch.ids);
        m.prune_heads({{1, {0, 1}}});
        CHECK(message_of<std::invalid_argument>([&] { m.backward(f, dlogits); }) ==
              "headwise::models::LlamaForCausalLM::backward: fwd.layers[1]: comes from a "
              "forward of 4 heads, before prune_heads (the layer has 2 now); run forward again");
        CHECK(
            message_of<std::invalid_argument>([&] { m.forward_train(batch.ids, {}, {}, true); }) ==
            "headwise::models::LlamaModel::forward_train: head_mask_grad: every layer "
            "with the same number of heads (layer 0 has 4 after prune_heads), got layer "
            "1 with 2");
    }
    CHECK(all_zero());
}

TEST_CASE("forward_train refuses left padding and output_attentions") {
    const Variant v{"gqa", 0, 2, false, false, false, 2};
    LlamaForCausalLM<double> m = random_model(config_of(v), 61);
    const Batch batch(false);
    Tensor<bool> left(Shape{2, 6});
    left(1, 0) = true;
    CHECK(message_of<std::invalid_argument>([&] { m.forward_train(batch.ids, left); }) ==
          "headwise::models::LlamaModel::forward_train: padding_mask: padding after each "
          "sequence's tokens only in forward_train (left padding shifts the rotary positions; "
          "use decode), got padding before token 1 of sequence 1");
    HeadOptions<double> heads;
    heads.output_attentions = true;
    CHECK(message_of<std::invalid_argument>([&] { m.forward_train(batch.ids, {}, heads); }) ==
          "headwise::models::LlamaModel::forward_train: heads.output_attentions: false (forward "
          "returns the attention maps), got true");
}

TEST_CASE("backward refuses bf16-released and GGUF-stored weights (inference only)") {
    LlamaConfig c = config_of(Variant{"gqa", 0, 2, false, false, false, 2});
    LlamaForCausalLM<float> m(c, Projection::fused, headwise::uninitialized);
    std::mt19937_64 rng(71);
    StateDict<float> sd = m.state_dict();
    for (auto& [name, t] : sd) t = Tensor<float>::randn(t.shape(), rng);
    m.load_pretrained(sd);
    m.train();
    const Batch batch(false);
    const auto f = m.forward_train(batch.ids);
    const Tensor<float> dlogits(Shape{2, 6, 11});
    m.zero_grad();
    SECTION("released") {
        m.with_precision(headwise::Precision::bf16, headwise::FloatWeights::release);
        CHECK(message_of<std::logic_error>([&] { m.backward(f, dlogits); }) ==
              "headwise::models::LlamaForCausalLM::backward: the float weights were released by "
              "with_precision(Precision::bf16, FloatWeights::release); backward needs the float "
              "weights (the model is inference-only) (with_precision(Precision::float32) brings "
              "them back, widened from bf16)");
        CHECK(message_of<std::logic_error>(
                  [&] { m.model().backward(f.saved->body, f.saved->body.last_hidden_state); }) ==
              "headwise::models::LlamaModel::backward: the float weights were released by "
              "with_precision(Precision::bf16, FloatWeights::release); backward needs the "
              "float weights (the model is inference-only) "
              "(with_precision(Precision::float32) brings them back, widened from bf16)");
    }
    SECTION("stored in a GGUF type") {
        m.with_weight_type(headwise::quant::Type::f16);
        CHECK(message_of<std::logic_error>([&] { m.backward(f, dlogits); }) ==
              "headwise::models::LlamaForCausalLM::backward: the weight is stored as F16, which "
              "is for inference only (with_precision(Precision::float32) brings float weights "
              "back, dequantized)");
        m.with_precision(headwise::Precision::float32);
        for (const auto& [name, t] : m.grad_dict())
            for (Index i = 0; i < t.numel(); ++i) REQUIRE(t.data()[i] == 0.0f);
    }
}

}  // namespace test_llama_backward
