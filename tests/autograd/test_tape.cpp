// SPDX-License-Identifier: MIT
// Tests of headwise/autograd/tape.hpp and functions.hpp: gradients of recorded models, residual
// sums, freeing, no-grad mode and the errors.
#include <headwise/autograd/functions.hpp>
#include <headwise/autograd/tape.hpp>

#include <headwise/gradcheck.hpp>

#include <cmath>      // std::isfinite
#include <cstdint>    // std::int64_t
#include <optional>   // std::nullopt, std::optional
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::make_pair
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/parameter_vectors.hpp"

namespace test_tape {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::autograd::Tape;
using headwise::autograd::Var;
using headwise::test::identical;

namespace {

constexpr Index kVocab = 5, kB = 2, kL = 4, kE = 8;

/// embedding -> encoder layer -> residual add -> encoder layer -> layer norm -> linear ->
/// cross_entropy: the composed model of the tests.
template <class T>
struct Model {
    headwise::Embedding<T> tokens;
    headwise::TransformerEncoderLayer<T> layer1, layer2;
    headwise::LayerNorm<T> norm;
    headwise::Linear<T> head;

    static headwise::TransformerEncoderLayerOptions options(bool norm_first) {
        headwise::TransformerEncoderLayerOptions o;
        o.d_model = kE;
        o.nhead = 2;
        o.dim_feedforward = 12;
        o.dropout = 0.0;
        o.activation = headwise::Activation::gelu;
        o.norm_first = norm_first;
        return o;
    }
    explicit Model(headwise::Generator& rng)
        : tokens(kVocab, kE, std::nullopt, rng),
          layer1(options(false), 3),
          layer2(options(true), 4),
          norm(kE),
          head(kE, kVocab, true, rng) {}

    /// Every parameter and gradient in one fixed order.
    template <class Visit>
    void visit(Visit&& visit) {
        for (auto& p : tokens.parameters()) visit(p);
        for (auto& p : layer1.parameters()) visit(p);
        for (auto& p : layer2.parameters()) visit(p);
        for (auto& p : norm.parameters()) visit(p);
        for (auto& p : head.parameters()) visit(p);
    }
    void zero_grad() {
        visit([](headwise::Parameter<T>& p) {
            for (T& g : p.grad) g = T(0);
        });
    }

    /// Only the forward: the tape does the rest.
    Var<T> loss(Tape<T>& tape, const Tensor<std::int64_t>& ids,
                const Tensor<std::int64_t>& targets) {
        namespace ag = headwise::autograd;
        const Var<T> e = ag::apply(tokens, tape, ids);  // [B, L, E]
        const Var<T> r = e + ag::apply(layer1, e);      // residual around the layer
        const Var<T> h = ag::apply(norm, ag::apply(layer2, r));
        const Var<T> logits = ag::reshape(ag::apply(head, h), Shape{kB * kL, kVocab});
        return ag::cross_entropy(logits, targets);
    }

    /// The same model with its backward written by hand; returns the loss.
    double loss_by_hand(const Tensor<std::int64_t>& ids, const Tensor<std::int64_t>& targets) {
        const Tensor<T> e = tokens.forward(ids);
        const auto f1 = layer1.forward(e);
        Tensor<T> r(e.shape());
        r.matrix() = e.matrix() + f1.output.matrix();
        const auto f2 = layer2.forward(r);
        const Tensor<T> n = norm.forward(f2.output);
        Tensor<T> logits = head.forward(n);
        const headwise::LossResult<T> l =
            headwise::cross_entropy<T>(logits.reshape(Shape{kB * kL, kVocab}), targets);
        const Tensor<T> dn = head.backward(n, l.grad.reshape(Shape{kB, kL, kVocab}));
        const Tensor<T> dr = layer2.backward(f2, norm.backward(f2.output, dn));
        Tensor<T> de = layer1.backward(f1, dr);
        de.matrix() += dr.matrix();  // the residual branch
        tokens.backward(ids, de);
        return l.value;
    }

    std::vector<Tensor<T>> grads() {
        std::vector<Tensor<T>> g;
        visit([&](headwise::Parameter<T>& p) { g.emplace_back(TensorView<const T>(p.grad)); });
        return g;
    }
};

struct Data {
    Tensor<std::int64_t> ids{Shape{kB, kL}}, targets{Shape{kB * kL}};
    Data() {
        for (Index i = 0; i < kB * kL; ++i) {
            ids.data()[i] = (3 * i + 1) % kVocab;
            targets.data()[i] = (7 * i + 2) % kVocab;
        }
    }
};

}  // namespace

TEMPLATE_TEST_CASE("tape: a composed model's gradients equal its hand-written backward bit for bit",
                   "", float, double) {
    using T = TestType;
    headwise::Generator rng(11);
    Model<T> model(rng);
    const Data d;
    Tape<T> tape;
    const Var<T> loss = model.loss(tape, d.ids, d.targets);
    tape.backward(loss);
    const std::vector<Tensor<T>> by_tape = model.grads();
    model.zero_grad();
    const double by_hand = model.loss_by_hand(d.ids, d.targets);
    CHECK(loss.item() == static_cast<double>(static_cast<T>(by_hand)));
    const std::vector<Tensor<T>> expected = model.grads();
    REQUIRE(by_tape.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        CAPTURE(i);
        CHECK(identical(by_tape[i], expected[i]));
    }
}

TEST_CASE("tape: a composed model's gradients pass gradcheck in double") {
    headwise::Generator rng(12);
    Model<double> model(rng);
    const Data d;
    std::vector<Tensor<double>> params;
    model.visit([&](headwise::Parameter<double>& p) {
        params.emplace_back(TensorView<const double>(p.value));
    });
    auto load = [&](const std::vector<Tensor<double>>& in) {
        std::size_t i = 0;
        model.visit([&](headwise::Parameter<double>& p) {
            for (Index k = 0; k < p.value.numel(); ++k) p.value.data()[k] = in[i].data()[k];
            ++i;
        });
    };
    auto f = [&](const std::vector<Tensor<double>>& in) {
        load(in);
        Tape<double> tape(Tape<double>::no_grad);
        Tensor<double> out(Shape{1});
        out.data()[0] = model.loss(tape, d.ids, d.targets).item();
        return out;
    };
    auto backward = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& g) {
        load(in);
        model.zero_grad();
        Tape<double> tape;
        tape.backward(model.loss(tape, d.ids, d.targets), g.reshape(Shape{}));
        return model.grads();
    };
    // eps balances truncation (O(eps^2)) and rounding (O(u / eps)): the smallest partials here
    // are 1e-5 and below, so rounding weighs more than for test_mha_gradcheck.cpp's 1e-5. Largest
    // relative errors measured: 3.0e-7 at eps = 3e-5, 7.6e-7 at 2e-5, 8.8e-7 at 1e-5.
    headwise::GradcheckOptions options;
    options.eps = 3e-5;
    const headwise::GradcheckResult r = headwise::gradcheck(f, backward, params, rng, options);
    INFO(r.where << " (largest relative error " << r.max_rel_error << ")");
    CHECK(r.ok);
    CHECK(r.checked == model.tokens.parameter_count() + model.layer1.parameter_count() +
                           model.layer2.parameter_count() + model.norm.parameter_count() +
                           model.head.parameter_count());
}

namespace {

/// self-attention (masked) -> dropout -> residual add -> layer norm -> linear -> GELU ->
/// concat_last with the norm's output -> linear -> RMS norm -> mse: every other recorded call.
template <class T>
struct Block {
    static constexpr Index kF = 6;
    headwise::MultiheadAttention<T> mha;
    headwise::Dropout<T> drop;
    headwise::LayerNorm<T> norm;
    headwise::Linear<T> lin1, lin3;
    headwise::GELU<T> gelu;
    headwise::RMSNorm<T> rms;
    headwise::AttentionMasks<T> masks;

    static headwise::MultiheadAttentionOptions options(double p) {
        headwise::MultiheadAttentionOptions o;
        o.embed_dim = kE;
        o.num_heads = 2;
        o.dropout = p;
        return o;
    }
    Block(double p, headwise::Generator& rng)
        : mha(options(p), 5),
          drop(p, 6),
          norm(kE),
          lin1(kE, kF, true, rng),
          lin3(kF + kE, kE, true, rng),
          rms(kE) {
        masks.is_causal = true;
        masks.key_padding_mask = Tensor<bool>(Shape{kB, kL});
        masks.key_padding_mask(1, kL - 1) = true;
    }
    std::vector<headwise::Parameter<T>> parameters() {
        std::vector<headwise::Parameter<T>> all;
        auto add = [&](std::vector<headwise::Parameter<T>> ps) {
            all.insert(all.end(), ps.begin(), ps.end());
        };
        add(mha.parameters());
        add(norm.parameters());
        add(lin1.parameters());
        add(lin3.parameters());
        add(rms.parameters());
        return all;
    }

    Var<T> loss(const Var<T>& x, const Tensor<T>& target) {
        namespace ag = headwise::autograd;
        const Var<T> r = x + ag::apply(drop, ag::apply(mha, x, masks));
        const Var<T> n = ag::apply(norm, r);
        const Var<T> c = ag::concat_last<T>({ag::apply(gelu, ag::apply(lin1, n)), n});
        return ag::mse_loss(ag::apply(rms, ag::apply(lin3, c)), target.view());
    }

    /// The same by hand; returns d loss / d x.
    Tensor<T> backward_by_hand(const Tensor<T>& x, const Tensor<T>& target) {
        const headwise::AttentionForward<T> fa = mha.forward(x, x, x, masks);
        const headwise::DropoutForward<T> fd = drop.forward(fa.output);
        Tensor<T> r(x.shape());
        r.matrix() = x.matrix() + fd.output.matrix();
        const Tensor<T> n = norm.forward(r);
        const Tensor<T> h = lin1.forward(n);
        const Tensor<T> c = headwise::concat<T>({gelu.forward(h).view(), n.view()}, -1);
        const Tensor<T> z = lin3.forward(c);
        const headwise::LossResult<T> l = headwise::mse_loss<T>(rms.forward(z), target);
        const Tensor<T> dc = lin3.backward(c, rms.backward(z, l.grad));
        std::vector<Tensor<T>> pieces = headwise::split(dc, {kF, kE}, -1);
        Tensor<T> dn = lin1.backward(n, gelu.backward(h, pieces[0]));
        dn.matrix() += pieces[1].matrix();
        Tensor<T> dx = norm.backward(r, dn);  // the residual branch, then the attention's
        headwise::AttentionGradients<T> g = mha.backward(fa, drop.backward(fd, dx));
        g.query.matrix() += g.key.matrix() + g.value.matrix();
        dx.matrix() += g.query.matrix();
        return dx;
    }
};

}  // namespace

TEMPLATE_TEST_CASE("tape: attention, dropout, concat and norms equal their hand-written backward",
                   "", float, double) {
    using T = TestType;
    headwise::Generator rng(21), rng2(21), data(22);
    Block<T> taped(0.25, rng), by_hand(0.25, rng2);  // same seeds: same weights, same masks
    const Tensor<T> x0 = Tensor<T>::randn(Shape{kB, kL, kE}, data);
    const Tensor<T> target = Tensor<T>::randn(Shape{kB, kL, kE}, data);
    Tape<T> tape;
    const Var<T> x = tape.input(x0, true);
    tape.backward(taped.loss(x, target));
    const Tensor<T> dx = by_hand.backward_by_hand(x0, target);
    CHECK(identical(tape.grad(x), dx));
    const auto a = taped.parameters();
    const auto b = by_hand.parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        CAPTURE(a[i].name);
        CHECK(identical<T>(a[i].grad, b[i].grad));
    }
}

TEST_CASE("tape: attention, dropout, concat and norms pass gradcheck in double") {
    headwise::Generator rng(23);
    Block<double> block(0.0, rng);
    const Tensor<double> target = Tensor<double>::randn(Shape{kB, kL, kE}, rng);
    std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{kB, kL, kE}, rng)};
    headwise::test::append_values(block.parameters(), inputs);
    auto load = [&](const std::vector<Tensor<double>>& in) {
        headwise::test::load_values(block.parameters(), in, 1);
    };
    auto f = [&](const std::vector<Tensor<double>>& in) {
        load(in);
        Tape<double> tape(Tape<double>::no_grad);
        Tensor<double> out(Shape{1});
        out.data()[0] = block.loss(tape.input(in[0]), target).item();
        return out;
    };
    auto backward = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& g) {
        load(in);
        for (auto& p : block.parameters())
            for (double& v : p.grad) v = 0.0;
        Tape<double> tape;
        const Var<double> x = tape.input(in[0], true);
        tape.backward(block.loss(x, target), g.reshape(Shape{}));
        std::vector<Tensor<double>> out{tape.grad(x)};
        headwise::test::append_grads(block.parameters(), out);
        return out;
    };
    headwise::GradcheckOptions options;
    options.eps = 3e-5;  // as for the composed model: 1.8e-7 here (9.2e-7 at 1e-5)
    const headwise::GradcheckResult r = headwise::gradcheck(f, backward, inputs, rng, options);
    INFO(r.where << " (largest relative error " << r.max_rel_error << ")");
    CHECK(r.ok);
    Index n = 0;
    for (const Tensor<double>& t : inputs) n += t.numel();
    CHECK(r.checked == n);
}

TEMPLATE_TEST_CASE("tape: cross-attention gives each argument its gradient", "", float, double) {
    using T = TestType;
    namespace ag = headwise::autograd;
    headwise::MultiheadAttentionOptions o;
    o.embed_dim = kE;
    o.num_heads = 2;
    o.kdim = 6;
    o.vdim = 6;
    headwise::MultiheadAttention<T> taped(o, 7), by_hand(o, 7);
    headwise::Generator rng(24);
    const Tensor<T> q0 = Tensor<T>::randn(Shape{kB, kL, kE}, rng);
    const Tensor<T> m0 = Tensor<T>::randn(Shape{kB, 3, 6}, rng);  // the memory: key and value
    const Tensor<T> dy = Tensor<T>::randn(Shape{kB, kL, kE}, rng);
    Tape<T> tape;
    const Var<T> q = tape.input(q0, true), m = tape.input(m0, true);
    tape.backward(ag::attention(taped, q, m, m), dy);

    const headwise::AttentionForward<T> f = by_hand.forward(q0, m0, m0);
    headwise::AttentionGradients<T> g = by_hand.backward(f, dy);
    g.key.matrix() += g.value.matrix();
    CHECK(identical(tape.grad(q), g.query));
    CHECK(identical(tape.grad(m), g.key));
    const auto a = taped.grad_dict();
    for (const auto& entry : by_hand.grad_dict()) {
        CAPTURE(entry.first);
        CHECK(identical(a.at(entry.first), entry.second));
    }
}

TEST_CASE("tape: a value used by several branches gets the sum of their gradients") {
    headwise::Generator rng(13);
    headwise::Linear<double> a(kE, kE, true, rng), b(kE, kE, true, rng);
    headwise::ReLU<double> relu;
    const Tensor<double> x0 = Tensor<double>::randn(Shape{kL, kE}, rng);
    const Tensor<double> target = Tensor<double>::randn(Shape{kL, kE}, rng);
    // y = relu(a(x)) + b(x) + x, three uses of x; loss = mse(y, target).
    auto run = [&](const std::vector<Tensor<double>>& in, Tape<double>& tape) {
        namespace ag = headwise::autograd;
        const Var<double> x = tape.input(in[0], /*requires_grad=*/true);
        const Var<double> y = ag::apply(relu, ag::apply(a, x)) + ag::apply(b, x) + x;
        return std::make_pair(x, ag::mse_loss(y, target.view()));
    };
    auto f = [&](const std::vector<Tensor<double>>& in) {
        Tape<double> tape(Tape<double>::no_grad);
        Tensor<double> out(Shape{1});
        out.data()[0] = run(in, tape).second.item();
        return out;
    };
    auto backward = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& g) {
        Tape<double> tape;
        const auto xl = run(in, tape);
        tape.backward(xl.second, g.reshape(Shape{}));
        return std::vector<Tensor<double>>{tape.grad(xl.first)};
    };
    const headwise::GradcheckResult r = headwise::gradcheck(f, backward, {x0}, rng);
    INFO(r.where << " (largest relative error " << r.max_rel_error << ")");
    CHECK(r.ok);
    CHECK(r.checked == x0.numel());

    SECTION("a Var added to itself counts twice") {
        Tape<double> tape;
        const Var<double> x = tape.input(x0, true);
        tape.backward(x + x, Tensor<double>::randn(x0.shape(), rng));
        const Tensor<double> g = tape.grad(x);
        tape.clear();
        const Var<double> x2 = tape.input(x0, true);
        const Tensor<double> dy = Tensor<double>::randn(x0.shape(), rng);
        tape.backward(x2 + x2, dy);
        for (Index i = 0; i < dy.numel(); ++i) CHECK(tape.grad(x2).data()[i] == 2 * dy.data()[i]);
        CHECK(g.numel() == x0.numel());
    }
}

TEST_CASE("tape: concat_last splits the gradient back to its parts") {
    headwise::Generator rng(14);
    const Tensor<double> a0 = Tensor<double>::randn(Shape{2, 3}, rng);
    const Tensor<double> b0 = Tensor<double>::randn(Shape{2, 2}, rng);
    Tape<double> tape;
    const Var<double> a = tape.input(a0, true), b = tape.input(b0, true);
    const Var<double> c = headwise::autograd::concat_last<double>({a, b});
    REQUIRE(c.shape() == Shape{2, 5});
    Tensor<double> dy = Tensor<double>::randn(Shape{2, 5}, rng);
    tape.backward(c, dy);
    for (Index i = 0; i < 2; ++i) {
        for (Index j = 0; j < 3; ++j) CHECK(tape.grad(a)(i, j) == dy(i, j));
        for (Index j = 0; j < 2; ++j) CHECK(tape.grad(b)(i, j) == dy(i, 3 + j));
    }
}

TEST_CASE("tape: backward frees the saved activations, clear() the rest") {
    headwise::Generator rng(15);
    Model<float> model(rng);
    const Data d;
    Tape<float> tape;
    const Var<float> loss = model.loss(tape, d.ids, d.targets);
    // embedding, layer1, add, layer2, norm, head, reshape, loss
    CHECK(tape.size() == 8);
    tape.backward(loss);
    CHECK(tape.size() == 0);

    SECTION("a recording not run backward is freed by clear()") {
        headwise::Linear<float> fc(kE, kE, true, rng);
        {
            const Var<float> x = tape.input(Tensor<float>::randn(Shape{kL, kE}, rng));
            CHECK(headwise::autograd::apply(fc, x).shape() == Shape{kL, kE});
        }
        CHECK(tape.size() == 1);  // the record of fc's call, holding x
        tape.clear();
        CHECK(tape.size() == 0);
    }
}

TEST_CASE("tape: in no-grad mode nothing is recorded") {
    headwise::Generator rng(16);
    Model<float> model(rng);
    const Data d;
    Tape<float> plain(Tape<float>::no_grad);
    const Var<float> l0 = model.loss(plain, d.ids, d.targets);
    CHECK(plain.size() == 0);
    CHECK(!l0.recorded());
    CHECK_THROWS_WITH(plain.backward(l0),
                      "headwise::autograd::Tape::backward: output: was not recorded (no-grad "
                      "mode, or it depends on no parameter and no input with requires_grad)");
    // The same value as a recorded forward, and no gradient touched.
    Tape<float> tape;
    CHECK(model.loss(tape, d.ids, d.targets).item() == l0.item());
    for (const Tensor<float>& g : model.grads())
        for (float v : g) CHECK(v == 0.0f);

    SECTION("eval-mode modules on a no-grad tape") {
        model.layer1.eval();
        model.layer2.eval();
        Tape<float> eval(Tape<float>::no_grad);
        CHECK(std::isfinite(model.loss(eval, d.ids, d.targets).item()));
        CHECK(eval.size() == 0);
        {
            headwise::autograd::NoGradGuard<float> guard(tape);
            tape.clear();
            model.loss(tape, d.ids, d.targets);
            CHECK(tape.size() == 0);
        }
        CHECK(tape.recording());
    }
}

TEST_CASE("tape: errors") {
    headwise::Generator rng(17);
    namespace ag = headwise::autograd;
    Tape<double> tape, other;
    const Var<double> x = tape.input(Tensor<double>::randn(Shape{2, 3}, rng), true);
    const Var<double> z = other.input(Tensor<double>::randn(Shape{2, 3}, rng), true);
    const Var<double> w = tape.input(Tensor<double>::randn(Shape{3, 2}, rng), true);

    CHECK_THROWS_AS(ag::add(x, w), headwise::shape_error);
    CHECK_THROWS_WITH(ag::add(x, w),
                      "headwise::autograd::add: b: expected shape [2, 3], got [3, 2]");
    CHECK_THROWS_WITH(ag::add(x, z), "headwise::autograd::add: b: belongs to another tape");
    CHECK_THROWS_WITH(tape.backward(z, z.value()),
                      "headwise::autograd::Tape::backward: output: belongs to another tape");
    CHECK_THROWS_WITH(tape.backward(x + x),
                      "headwise::autograd::Tape::backward: loss: expected shape one element "
                      "(pass grad_output for any other output), got [2, 3]");
    CHECK_THROWS_WITH(tape.grad(x), "headwise::autograd::Tape::grad: x: backward has not run yet");

    const Var<double> loss = ag::mse_loss(x, z.value());
    tape.backward(loss);
    CHECK_THROWS_WITH(tape.backward(loss),
                      "headwise::autograd::Tape::backward: output: backward already ran over this "
                      "recording and freed its saved activations; record the forward again");
    CHECK_THROWS_WITH(ag::add(x, x),
                      "headwise::autograd::add: a: was recorded before backward, which freed its "
                      "graph; record the forward again");
    tape.clear();
    CHECK_THROWS_WITH(ag::reshape(x, Shape{6}),
                      "headwise::autograd::reshape: x: is stale: recorded before the tape was "
                      "cleared or a new recording began");
    CHECK_THROWS_WITH(ag::add(Var<double>(), x),
                      "headwise::autograd::add: a: is an empty Var (made by no tape)");

    SECTION("a module in eval mode on a recording tape") {
        auto o = Model<double>::options(false);
        headwise::TransformerEncoderLayer<double> layer(o, 1);
        layer.eval();
        const Var<double> y = tape.input(Tensor<double>::randn(Shape{kL, kE}, rng));
        CHECK_THROWS_WITH(ag::apply(layer, y),
                          "headwise::autograd::apply(TransformerEncoderLayer): m: "
                          "headwise::TransformerEncoderLayer is in eval mode, which saves nothing "
                          "for backward; call train(), or run it on a tape in no-grad mode");
    }
}

TEST_CASE("tape: a Var of a destroyed tape is refused, by a new tape at the same address too") {
    headwise::Generator rng(23);
    namespace ag = headwise::autograd;
    // std::optional reuses its storage: the second tape sits where the first one was, and both
    // begin with their first recording, which a per-tape count would number alike.
    std::optional<Tape<double>> tape;
    tape.emplace();
    const Tape<double>* first = &*tape;
    const Var<double> old_leaf = tape->input(Tensor<double>::randn(Shape{2, 3}, rng), true);
    const Var<double> old_sum = old_leaf + old_leaf;  // node 1 of the old recording
    tape.reset();
    CHECK(old_leaf.tape() == nullptr);
    CHECK_THROWS_AS(ag::add(old_leaf, old_leaf), std::invalid_argument);
    CHECK_THROWS_WITH(ag::add(old_leaf, old_leaf),
                      "headwise::autograd::add: a: belongs to a tape that no longer exists (a "
                      "Var must not outlive its tape)");

    tape.emplace();
    REQUIRE(&*tape == first);
    const Var<double> leaf = tape->input(Tensor<double>::randn(Shape{2, 3}, rng), true);
    const Var<double> sum = leaf + leaf;
    const Tensor<double> target(Shape{2, 3});
    const Var<double> loss = ag::mse_loss(sum + leaf, TensorView<const double>(target));
    // The old Vars' nodes exist in the new recording (indices 0 and 1): before, they passed for
    // its own and backward or grad() used the new nodes with the old values.
    CHECK_THROWS_WITH(ag::add(leaf, old_sum),
                      "headwise::autograd::add: b: belongs to a tape that no longer exists (a "
                      "Var must not outlive its tape)");
    CHECK_THROWS_WITH(tape->backward(old_sum, old_sum.value()),
                      "headwise::autograd::Tape::backward: output: belongs to a tape that no "
                      "longer exists (a Var must not outlive its tape)");
    tape->backward(loss);
    CHECK_THROWS_AS(tape->grad(old_leaf), std::invalid_argument);
    CHECK_THROWS_WITH(tape->grad(old_leaf),
                      "headwise::autograd::Tape::grad: x: belongs to a tape that no longer exists "
                      "(a Var must not outlive its tape)");
    CHECK(tape->grad(leaf).shape() == Shape{2, 3});

    // A live tape's recordings are numbered apart from every other tape's: a Var of another
    // tape is never stale on this one, whatever either has recorded.
    Tape<double> other;
    const Var<double> z = other.input(Tensor<double>::randn(Shape{2, 3}, rng), true);
    CHECK_THROWS_WITH(ag::add(leaf, z), "headwise::autograd::add: b: belongs to another tape");
}

}  // namespace test_tape
