// SPDX-License-Identifier: MIT
// Tests of the open autograd::apply (module_traits.hpp): a Llama-style block, the decoder layer and
// a module of the test's own on the tape, against the modules' hand-called backwards bit for bit
// and against gradcheck; Sequential<Linear, SwiGLU, RMSNorm> trained with AdamW.
#include <headwise/autograd/functions.hpp>
#include <headwise/autograd/module_traits.hpp>
#include <headwise/autograd/sequential.hpp>
#include <headwise/autograd/tape.hpp>

#include <headwise/gradcheck.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/optim/adam.hpp>

#include <algorithm>  // std::copy_n
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"

namespace test_tape_modules {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::autograd::BackwardConvention;
using headwise::autograd::module_traits;
using headwise::autograd::Residual;
using headwise::autograd::Sequential;
using headwise::autograd::Tape;
using headwise::autograd::Var;
using headwise::test::identical;
namespace ag = headwise::autograd;

namespace {

constexpr Index kB = 2, kL = 5, kE = 8, kI = 12;

// Which convention each module of the library follows, by detection alone.
static_assert(module_traits<headwise::Linear<double>, 1>::convention ==
              BackwardConvention::on_input);
static_assert(module_traits<headwise::RMSNorm<float>, 1>::convention ==
              BackwardConvention::on_input);
static_assert(module_traits<headwise::GELU<float>, 1>::convention == BackwardConvention::on_input);
static_assert(module_traits<headwise::Dropout<float>, 1>::convention == BackwardConvention::record);
static_assert(!module_traits<headwise::Dropout<float>, 1>::saves_activations);
static_assert(module_traits<headwise::SwiGLU<double>, 1>::convention == BackwardConvention::record);
static_assert(module_traits<headwise::SwiGLU<double>, 1>::saves_activations);
static_assert(module_traits<headwise::TransformerEncoderLayer<double>, 1,
                            const headwise::AttentionMasks<double>&>::convention ==
              BackwardConvention::record);
static_assert(module_traits<headwise::MultiheadAttention<double>, 1>::convention ==
              BackwardConvention::gradients);
static_assert(module_traits<headwise::MultiheadAttention<double>, 1>::inputs == 3);
static_assert(module_traits<headwise::TransformerDecoderLayer<double>, 2>::convention ==
              BackwardConvention::gradients);
static_assert(module_traits<headwise::TransformerDecoderLayer<double>, 1>::inputs == 2);
// The Llama decoder layer: forward(x, masks) keeps a record, backward(record, dy) gives dx.
static_assert(module_traits<headwise::models::LlamaDecoderLayer<double>, 1>::convention ==
              BackwardConvention::record);
static_assert(module_traits<headwise::Embedding<double>, 1>::convention ==
              BackwardConvention::none);

headwise::MultiheadAttentionOptions attention_options() {
    headwise::MultiheadAttentionOptions o;
    o.embed_dim = kE;
    o.num_heads = 2;
    o.num_kv_heads = 1;  // grouped-query, as Llama's
    o.bias = false;
    o.rotary.enabled = true;
    return o;
}

/// x + attn(rms1(x)), then h + mlp(rms2(h)): the Llama block, declared once.
template <class T>
auto make_block(std::uint64_t seed) {
    headwise::Generator rng(seed);
    return Sequential{
        Residual(Sequential{headwise::RMSNorm<T>(kE),
                            headwise::MultiheadAttention<T>(attention_options(), seed + 1)}),
        Residual(Sequential{headwise::RMSNorm<T>(kE), headwise::SwiGLU<T>(kE, kI, rng)})};
}

/// Random norm weights, so that their gradients mean something.
template <class Block>
void perturb_norms(Block& block, std::uint64_t seed) {
    headwise::Generator rng(seed);
    for (auto& p : block.parameters())
        if (p.name.find("0.weight") != std::string::npos && p.value.rank() == 1)
            for (Index i = 0; i < p.value.numel(); ++i)
                p.value.data()[i] += 0.3 * headwise::normal(rng);
}

/// The module of a user: y = x ⊙ x, with the on_input convention and no overload of apply.
struct Square {
    using value_type = double;
    Tensor<double> forward(TensorView<const double> x) const {
        Tensor<double> y(x.shape());
        for (Index i = 0; i < x.numel(); ++i) y.data()[i] = x.data()[i] * x.data()[i];
        return y;
    }
    Tensor<double> backward(TensorView<const double> x, TensorView<const double> dy) const {
        Tensor<double> dx(x.shape());
        for (Index i = 0; i < x.numel(); ++i) dx.data()[i] = 2.0 * x.data()[i] * dy.data()[i];
        return dx;
    }
};
static_assert(module_traits<Square, 1>::convention == BackwardConvention::on_input);

}  // namespace

TEST_CASE("apply: a Llama block (RMSNorm, rotary GQA attention, SwiGLU) on the tape") {
    auto block = make_block<double>(11);
    auto copy = make_block<double>(11);
    perturb_norms(block, 3);
    perturb_norms(copy, 3);
    REQUIRE(block.state_dict().size() == copy.state_dict().size());
    headwise::Generator data(12);
    const Tensor<double> x0 = Tensor<double>::randn(Shape{kB, kL, kE}, data);
    const Tensor<double> dy = Tensor<double>::randn(Shape{kB, kL, kE}, data);

    Tape<double> tape;
    const Var<double> x = tape.input(x0, true);
    const Var<double> y = ag::apply(block, x);
    tape.backward(y, dy);

    // By hand: h = x + attn(n1(x)), y = h + mlp(n2(h)).
    auto& n1 = copy.get<0>().inner().get<0>();
    auto& attn = copy.get<0>().inner().get<1>();
    auto& n2 = copy.get<1>().inner().get<0>();
    auto& mlp = copy.get<1>().inner().get<1>();
    const Tensor<double> a = n1.forward(x0);
    const headwise::AttentionForward<double> fa = attn.forward(a, a, a);
    Tensor<double> h(x0.shape());
    h.matrix() = x0.matrix() + fa.output.matrix();
    const Tensor<double> b = n2.forward(h);
    const headwise::SwiGLUForward<double> fm = mlp.forward(b);
    Tensor<double> y_ref(x0.shape());
    y_ref.matrix() = h.matrix() + fm.output.matrix();
    CHECK(identical<double>(y.value(), y_ref));

    Tensor<double> dh = n2.backward(h, mlp.backward(fm, dy));
    dh.matrix() += dy.matrix();
    headwise::AttentionGradients<double> g = attn.backward(fa, dh);
    g.query.matrix() += g.key.matrix() + g.value.matrix();
    Tensor<double> dx = n1.backward(x0, g.query);
    dx.matrix() += dh.matrix();

    CHECK(identical(tape.grad(x), dx));
    const auto got = block.grad_dict();
    const auto expected = copy.grad_dict();
    REQUIRE(got.size() == expected.size());
    for (const auto& entry : expected) {
        CAPTURE(entry.first);
        CHECK(identical(got.at(entry.first), entry.second));
    }

    SECTION("gradcheck over the input, the attention's in-projection and a norm weight") {
        auto params = block.parameters();
        std::vector<headwise::Parameter<double>> checked;
        for (auto& p : params)
            if (p.name == "0.1.in_proj_weight" || p.name == "1.0.weight") checked.push_back(p);
        REQUIRE(checked.size() == 2);
        const auto load = [&](const std::vector<Tensor<double>>& in) {
            for (std::size_t i = 0; i < checked.size(); ++i)
                std::copy_n(in[i + 1].data(), in[i + 1].numel(), checked[i].value.data());
        };
        const auto f = [&](const std::vector<Tensor<double>>& in) {
            load(in);
            Tape<double> t(Tape<double>::no_grad);
            return Tensor<double>(ag::apply(block, t.input(in[0])).value());
        };
        const auto back = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& G) {
            load(in);
            block.zero_grad();
            Tape<double> t;
            const Var<double> xv = t.input(in[0], true);
            t.backward(ag::apply(block, xv), G);
            return std::vector<Tensor<double>>{t.grad(xv), Tensor<double>(checked[0].grad),
                                               Tensor<double>(checked[1].grad)};
        };
        headwise::Generator rng(13);
        const auto r = headwise::gradcheck(
            f, back, {x0, Tensor<double>(checked[0].value), Tensor<double>(checked[1].value)}, rng);
        CAPTURE(r.where, r.max_rel_error);
        CHECK(r.ok);
        CHECK(r.checked == x0.numel() + checked[0].value.numel() + checked[1].value.numel());
    }
}

TEST_CASE("apply: a causal self-attention call with masks and the decoder layer") {
    headwise::TransformerDecoderLayerOptions o;
    o.d_model = kE;
    o.nhead = 2;
    o.dim_feedforward = 10;
    o.dropout = 0.0;
    o.norm_first = true;
    headwise::TransformerDecoderLayer<double> layer(o, 21), copy(o, 21);
    headwise::Generator data(22);
    const Tensor<double> t0 = Tensor<double>::randn(Shape{kB, kL, kE}, data);
    const Tensor<double> m0 = Tensor<double>::randn(Shape{kB, 3, kE}, data);
    const Tensor<double> dy = Tensor<double>::randn(Shape{kB, kL, kE}, data);
    headwise::AttentionMasks<double> causal;
    causal.is_causal = true;
    Tensor<bool> pad(Shape{kB, 3});
    pad(1, 2) = true;
    headwise::AttentionMasks<double> memory_masks;
    memory_masks.key_padding_mask = pad;

    SECTION("two Vars: each gets its own gradient") {
        Tape<double> tape;
        const Var<double> tgt = tape.input(t0, true);
        const Var<double> memory = tape.input(m0, true);
        tape.backward(ag::apply(layer, tgt, memory, causal, memory_masks), dy);
        const auto f = copy.forward(t0, m0, causal, memory_masks);
        const auto g = copy.backward(f, dy);
        CHECK(identical(tape.grad(tgt), g.tgt));
        CHECK(identical(tape.grad(memory), g.memory));
        const auto got = layer.grad_dict();
        for (const auto& entry : copy.grad_dict()) {
            CAPTURE(entry.first);
            CHECK(identical(got.at(entry.first), entry.second));
        }
        // Gradcheck of both inputs through the tape.
        const auto fn = [&](const std::vector<Tensor<double>>& in) {
            Tape<double> t(Tape<double>::no_grad);
            return Tensor<double>(
                ag::apply(layer, t.input(in[0]), t.input(in[1]), causal, memory_masks).value());
        };
        const auto back = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& G) {
            Tape<double> t;
            const Var<double> a = t.input(in[0], true), b = t.input(in[1], true);
            t.backward(ag::apply(layer, a, b, causal, memory_masks), G);
            return std::vector<Tensor<double>>{t.grad(a), t.grad(b)};
        };
        headwise::Generator rng(23);
        const auto r = headwise::gradcheck(fn, back, {t0, m0}, rng);
        CAPTURE(r.where);
        CHECK(r.ok);
        CHECK(r.checked == t0.numel() + m0.numel());
    }
    SECTION("one Var as both inputs: the gradients summed") {
        Tape<double> tape;
        const Var<double> x = tape.input(t0, true);
        tape.backward(ag::apply(layer, x, causal), dy);
        const auto f = copy.forward(t0, t0, causal);
        auto g = copy.backward(f, dy);
        g.tgt.matrix() += g.memory.matrix();
        CHECK(identical(tape.grad(x), g.tgt));
    }
    SECTION("errors name the Vars by the gradient fields, and eval mode is refused") {
        Tape<double> tape, other;
        const Var<double> tgt = tape.input(t0, true);
        const Var<double> memory = other.input(m0, true);
        CHECK_THROWS_WITH(ag::apply(layer, tgt, memory),
                          "headwise::autograd::apply(TransformerDecoderLayer): memory: belongs to "
                          "another tape");
        layer.eval();
        CHECK_THROWS_WITH(ag::apply(layer, tgt, tgt),
                          "headwise::autograd::apply(TransformerDecoderLayer): m: "
                          "headwise::TransformerDecoderLayer is in eval mode, which saves nothing "
                          "for backward; call train(), or run it on a tape in no-grad mode");
        CHECK(tape.size() == 0);
        Tape<double> plain(Tape<double>::no_grad);
        CHECK(ag::apply(layer, plain.input(t0), plain.input(m0)).shape() == t0.shape());
    }
}

TEST_CASE("apply: a module of the user's own with no overload") {
    Square sq;
    headwise::Generator data(31);
    const Tensor<double> x0 = Tensor<double>::randn(Shape{3, 2}, data);
    Tape<double> tape;
    const Var<double> x = tape.input(x0, true);
    const Var<double> y = ag::apply(sq, ag::apply(sq, x));  // x^4
    tape.backward(y, Tensor<double>(Shape{3, 2}, std::vector<double>(6, 1.0)));
    for (Index i = 0; i < x0.numel(); ++i) {
        const double v = x0.data()[i];
        CHECK(tape.grad(x).data()[i] == 2.0 * (v * v) * 1.0 * 2.0 * v);
    }
    CHECK_THROWS_WITH(ag::apply(sq, Var<double>()),
                      "headwise::autograd::apply(module): x: is an empty Var (made by no tape)");
}

TEST_CASE("apply: a Sequential of Linear, SwiGLU and RMSNorm trains with AdamW") {
    headwise::Generator rng(41), data(42);
    Sequential<headwise::Linear<float>, headwise::SwiGLU<float>, headwise::RMSNorm<float>> net{
        headwise::Linear<float>(4, kE, true, rng), headwise::SwiGLU<float>(kE, kI, rng),
        headwise::RMSNorm<float>(kE)};
    const Tensor<float> x0 = Tensor<float>::randn(Shape{16, 4}, data);
    const Tensor<float> target = Tensor<float>::randn(Shape{16, kE}, data);
    headwise::AdamOptions ao;
    ao.lr = 1e-2;
    headwise::AdamW<float> opt(net.parameters(), ao);
    Tape<float> tape;
    std::vector<double> losses;
    for (int step = 0; step < 30; ++step) {
        tape.clear();
        net.zero_grad();
        const Var<float> loss = ag::mse_loss(ag::apply(net, tape.input(x0)), target.view());
        tape.backward(loss);
        opt.step();
        losses.push_back(loss.item());
    }
    CAPTURE(losses.front(), losses.back());
    CHECK(losses.back() < 0.8 * losses.front());
    for (std::size_t i = 1; i < losses.size(); ++i) CHECK(losses[i] <= losses[i - 1] * 1.05);
}

}  // namespace test_tape_modules
