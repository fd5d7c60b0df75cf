// SPDX-License-Identifier: MIT
// Tests of headwise/autograd/tensor_functions.hpp and Tape::parameter: slice, index_select,
// sum/mean/max with padding masks, mul, matmul_transposed, scale; gradcheck in double, plain-loop
// references, errors.
#include <headwise/autograd/functions.hpp>
#include <headwise/autograd/tape.hpp>
#include <headwise/autograd/tensor_functions.hpp>

#include <headwise/gradcheck.hpp>

#include <cmath>       // std::isnan
#include <cstdint>     // std::int64_t
#include <functional>  // std::function
#include <limits>      // std::numeric_limits
#include <optional>    // std::nullopt
#include <stdexcept>   // std::invalid_argument
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"

namespace test_tape_tensor_functions {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::autograd::Tape;
using headwise::autograd::Var;
using headwise::test::identical;
namespace ag = headwise::autograd;

namespace {

using Op = std::function<Var<double>(const std::vector<Var<double>>&)>;

/// gradcheck of `op` over all `inputs`: f on a no-grad tape, backward from a recording one.
headwise::GradcheckResult check(const Op& op, const std::vector<Tensor<double>>& inputs,
                                std::uint64_t seed = 5) {
    headwise::Generator rng(seed);
    const auto f = [&](const std::vector<Tensor<double>>& in) {
        Tape<double> tape(Tape<double>::no_grad);
        std::vector<Var<double>> v;
        for (const Tensor<double>& t : in) v.push_back(tape.input(t));
        return Tensor<double>(op(v).value());
    };
    const auto backward = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& g) {
        Tape<double> tape;
        std::vector<Var<double>> v;
        for (const Tensor<double>& t : in) v.push_back(tape.input(t, true));
        tape.backward(op(v), g);
        std::vector<Tensor<double>> out;
        for (const Var<double>& x : v) out.push_back(tape.grad(x));
        return out;
    };
    return headwise::gradcheck(f, backward, inputs, rng);
}

/// The gradient of sum(op(x) ⊙ dy) with respect to x, from the tape.
Tensor<double> grad_of(const std::function<Var<double>(const Var<double>&)>& op,
                       const Tensor<double>& x0, const Tensor<double>& dy) {
    Tape<double> tape;
    const Var<double> x = tape.input(x0, true);
    tape.backward(op(x), dy);
    return tape.grad(x);
}

Tensor<bool> mask_of(const Shape& s, const std::vector<int>& bits) {
    Tensor<bool> m(s);
    for (Index i = 0; i < m.numel(); ++i) m.data()[i] = bits[static_cast<std::size_t>(i)] != 0;
    return m;
}

}  // namespace

TEST_CASE("tape functions: slice and index_select against loops and gradcheck") {
    headwise::Generator rng(1);
    const Tensor<double> x0 = Tensor<double>::randn(Shape{2, 5, 3}, rng);  // [B, S, E]
    const Tensor<double> dy1 = Tensor<double>::randn(Shape{2, 2, 3}, rng);

    // slice(x, 1, 2, 2): positions 2 and 3 of each sequence.
    Tape<double> tape;
    const Var<double> x = tape.input(x0, true);
    const Var<double> s = ag::slice(x, 1, 2, 2);
    REQUIRE(s.shape() == Shape{2, 2, 3});
    for (Index b = 0; b < 2; ++b)
        for (Index j = 0; j < 2; ++j)
            for (Index e = 0; e < 3; ++e) CHECK(s.value()(b, j, e) == x0(b, j + 2, e));
    tape.backward(s, dy1);
    Tensor<double> expected(x0.shape());
    for (Index b = 0; b < 2; ++b)
        for (Index j = 0; j < 2; ++j)
            for (Index e = 0; e < 3; ++e) expected(b, j + 2, e) = dy1(b, j, e);
    CHECK(identical<double>(tape.grad(x), expected));
    // The last axis, negative dim.
    const auto last = check([](const auto& v) { return ag::slice(v[0], -1, 1, 2); }, {x0});
    CHECK(last.ok);
    CHECK(last.checked == x0.numel());

    // index_select with a repeat: the repeated slice's gradients add up.
    const std::vector<std::int64_t> ids_v{4, 0, 4};
    const TensorView<const std::int64_t> ids(ids_v.data(), Shape{3});
    const Tensor<double> dy2 = Tensor<double>::randn(Shape{2, 3, 3}, rng);
    const Tensor<double> g =
        grad_of([&](const Var<double>& v) { return ag::index_select(v, 1, ids); }, x0, dy2);
    Tensor<double> g_ref(x0.shape());
    for (Index b = 0; b < 2; ++b)
        for (Index i = 0; i < 3; ++i)
            for (Index e = 0; e < 3; ++e)
                g_ref(b, ids_v[static_cast<std::size_t>(i)], e) += dy2(b, i, e);
    CHECK(identical<double>(g, g_ref));
    const auto sel = check([&](const auto& v) { return ag::index_select(v[0], 1, ids); }, {x0});
    CHECK(sel.ok);
    CHECK(sel.checked == x0.numel());
    const auto sel0 = check(
        [&](const auto& v) {
            return ag::index_select(v[0], 0,
                                    TensorView<const std::int64_t>(ids_v.data() + 1, Shape{1}));
        },
        {x0});
    CHECK(sel0.ok);
}

TEST_CASE("tape functions: sum, mean and max over a dimension with and without padding") {
    headwise::Generator rng(2);
    const Tensor<double> x0 = Tensor<double>::randn(Shape{3, 4, 2}, rng);  // [B, S, E]
    // Row 0: position 3 padded; row 1: none; row 2: all padded.
    const Tensor<bool> pad = mask_of(Shape{3, 4}, {0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1});
    const TensorView<const bool> m = pad;
    const Tensor<double> dy = Tensor<double>::randn(Shape{3, 2}, rng);

    // Plain loops: the values and gradients the functions must give, bit for bit.
    Tensor<double> sum_ref(Shape{3, 2}), mean_ref(Shape{3, 2}), max_ref(Shape{3, 2});
    Tensor<double> dsum(x0.shape()), dmean(x0.shape()), dmax(x0.shape());
    for (Index b = 0; b < 3; ++b)
        for (Index e = 0; e < 2; ++e) {
            Index count = 0, arg = -1;
            for (Index j = 0; j < 4; ++j) {
                if (pad(b, j)) continue;
                ++count;
                sum_ref(b, e) += x0(b, j, e);
                if (arg < 0 || x0(b, j, e) > x0(b, arg, e)) arg = j;
            }
            mean_ref(b, e) = count ? sum_ref(b, e) / static_cast<double>(count) : 0.0;
            max_ref(b, e) = arg < 0 ? 0.0 : x0(b, arg, e);
            for (Index j = 0; j < 4; ++j) {
                if (pad(b, j)) continue;
                dsum(b, j, e) = dy(b, e);
                dmean(b, j, e) = dy(b, e) / static_cast<double>(count);
            }
            if (arg >= 0) dmax(b, arg, e) = dy(b, e);
        }

    Tape<double> no_grad(Tape<double>::no_grad);
    const Var<double> xc = no_grad.input(x0);
    CHECK(identical<double>(ag::sum(xc, 1, m).value(), sum_ref));
    CHECK(identical<double>(ag::mean(xc, 1, m).value(), mean_ref));
    CHECK(identical<double>(ag::max(xc, 1, m).value(), max_ref));
    // The fully padded row: 0, never NaN.
    CHECK(ag::mean(xc, 1, m).value()(2, 0) == 0.0);
    CHECK(ag::max(xc, 1, m).value()(2, 1) == 0.0);

    CHECK(identical<double>(grad_of([&](const Var<double>& v) { return ag::sum(v, 1, m); }, x0, dy),
                            dsum));
    CHECK(identical<double>(
        grad_of([&](const Var<double>& v) { return ag::mean(v, 1, m); }, x0, dy), dmean));
    CHECK(identical<double>(grad_of([&](const Var<double>& v) { return ag::max(v, 1, m); }, x0, dy),
                            dmax));

    for (int which = 0; which < 3; ++which) {
        CAPTURE(which);
        const auto op = [&](const Var<double>& v, bool masked) {
            if (which == 0) return masked ? ag::sum(v, 1, m) : ag::sum(v, 1);
            if (which == 1) return masked ? ag::mean(v, 1, m) : ag::mean(v, 1);
            return masked ? ag::max(v, 1, m) : ag::max(v, 1);
        };
        const auto masked = check([&](const auto& v) { return op(v[0], true); }, {x0});
        CHECK(masked.ok);
        CHECK(masked.checked == x0.numel());
        const auto plain = check([&](const auto& v) { return op(v[0], false); }, {x0});
        CHECK(plain.ok);
        CAPTURE(masked.where, plain.where);
    }
    // Other dims: the first (no mask) and the last with a mask over the whole shape.
    CHECK(check([](const auto& v) { return ag::mean(v[0], 0); }, {x0}).ok);
    Tensor<bool> full(x0.shape());
    full.data()[1] = true;
    const TensorView<const bool> fm = full;
    CHECK(check([&](const auto& v) { return ag::max(v[0], -1, fm); }, {x0}).ok);
    // Without a mask mean is sum / S.
    const Tensor<double> plain_mean = Tensor<double>(ag::mean(xc, 1).value());
    const Tensor<double> plain_sum = Tensor<double>(ag::sum(xc, 1).value());
    for (Index i = 0; i < plain_mean.numel(); ++i)
        CHECK(plain_mean.data()[i] == plain_sum.data()[i] / 4.0);
}

TEST_CASE("tape functions: max takes the first maximum and propagates NaN") {
    Tensor<double> x0(Shape{1, 3});
    x0(0, 0) = 2.0;
    x0(0, 1) = 5.0;
    x0(0, 2) = 5.0;
    Tensor<double> dy(Shape{1});
    dy(0) = 1.5;
    const Tensor<double> g = grad_of([](const Var<double>& v) { return ag::max(v, 1); }, x0, dy);
    CHECK(g(0, 0) == 0.0);
    CHECK(g(0, 1) == 1.5);
    CHECK(g(0, 2) == 0.0);
    x0(0, 2) = std::numeric_limits<double>::quiet_NaN();
    Tape<double> tape(Tape<double>::no_grad);
    CHECK(std::isnan(ag::max(tape.input(x0), 1).value()(0)));
}

TEST_CASE("tape functions: mul, matmul_transposed and scale against loops and gradcheck") {
    headwise::Generator rng(3);
    const Tensor<double> a0 = Tensor<double>::randn(Shape{2, 3, 4}, rng);
    const Tensor<double> b0 = Tensor<double>::randn(Shape{2, 3, 4}, rng);
    const Tensor<double> w0 = Tensor<double>::randn(Shape{5, 4}, rng);  // [N, K]

    const auto mul = check([](const auto& v) { return v[0] * v[1]; }, {a0, b0});
    CHECK(mul.ok);
    CHECK(mul.checked == 2 * a0.numel());
    // One Var twice: d(a ⊙ a) = 2 a dy.
    const Tensor<double> dy = Tensor<double>::randn(a0.shape(), rng);
    const Tensor<double> g = grad_of([](const Var<double>& v) { return v * v; }, a0, dy);
    for (Index i = 0; i < a0.numel(); ++i)
        CHECK(g.data()[i] == dy.data()[i] * a0.data()[i] + dy.data()[i] * a0.data()[i]);

    const auto mm =
        check([](const auto& v) { return ag::matmul_transposed(v[0], v[1]); }, {a0, w0});
    CHECK(mm.ok);
    CHECK(mm.checked == a0.numel() + w0.numel());
    CAPTURE(mm.where);
    // The product against a loop.
    Tape<double> tape(Tape<double>::no_grad);
    const Var<double> y = ag::matmul_transposed(tape.input(a0), tape.input(w0));
    REQUIRE(y.shape() == Shape{2, 3, 5});
    double worst = 0.0;
    for (Index b = 0; b < 2; ++b)
        for (Index l = 0; l < 3; ++l)
            for (Index n = 0; n < 5; ++n) {
                double s = 0.0;
                for (Index k = 0; k < 4; ++k) s += a0(b, l, k) * w0(n, k);
                worst = std::max(worst, std::abs(s - y.value()(b, l, n)));
            }
    CHECK(worst < 1e-14);

    const auto sc = check([](const auto& v) { return 0.25 * (v[0] * -3.0); }, {a0});
    CHECK(sc.ok);
    const Var<double> z = ag::scale(tape.input(a0), 0.5);
    for (Index i = 0; i < a0.numel(); ++i) CHECK(z.value()[i] == 0.5 * a0.data()[i]);
}

TEST_CASE("tape functions: errors name the function, the argument and both shapes") {
    headwise::Generator rng(4);
    Tape<double> tape;
    const Var<double> x = tape.input(Tensor<double>::randn(Shape{2, 3, 4}, rng), true);
    const Var<double> w = tape.input(Tensor<double>::randn(Shape{5, 3}, rng), true);
    CHECK_THROWS_AS(ag::slice(x, 3, 0, 1), std::invalid_argument);
    CHECK_THROWS_WITH(ag::slice(x, 3, 0, 1),
                      "headwise::autograd::slice: dim: must be in [-3, 3) for x of shape "
                      "[2, 3, 4], got 3");
    CHECK_THROWS_WITH(ag::slice(x, 1, -1, 1),
                      "headwise::autograd::slice: start: must be in [0, 3] for x of shape "
                      "[2, 3, 4] along dim 1, got -1");
    CHECK_THROWS_WITH(ag::slice(x, -2, 2, 2),
                      "headwise::autograd::slice: length: must be in [0, 1] (start 2 of extent "
                      "3), got 2");
    const std::vector<std::int64_t> bad{0, 3};
    CHECK_THROWS_WITH(ag::index_select(x, 1, TensorView<const std::int64_t>(bad.data(), Shape{2})),
                      "headwise::autograd::index_select: indices[1]: must be in [0, 3) for x of "
                      "shape [2, 3, 4] along dim 1, got 3");
    CHECK_THROWS_AS(ag::index_select(x, 1, TensorView<const std::int64_t>(bad.data(), Shape{1, 2})),
                    headwise::shape_error);
    CHECK_THROWS_WITH(
        ag::index_select(x, 1, TensorView<const std::int64_t>(bad.data(), Shape{1, 2})),
        "headwise::autograd::index_select: indices: expected shape [K] (rank 1), got "
        "[1, 2]");
    const Tensor<bool> pad(Shape{2, 4});
    CHECK_THROWS_AS(ag::mean(x, 1, pad), headwise::shape_error);
    CHECK_THROWS_WITH(ag::mean(x, 1, pad),
                      "headwise::autograd::mean: padding_mask: expected shape [2, 3] (x's "
                      "dimensions up to dim 1), got [2, 4]");
    CHECK_THROWS_WITH(ag::max(x, -4),
                      "headwise::autograd::max: dim: must be in [-3, 3) for x of shape [2, 3, 4], "
                      "got -4");
    CHECK_THROWS_AS(ag::mul(x, w), headwise::shape_error);
    CHECK_THROWS_WITH(ag::mul(x, w),
                      "headwise::autograd::mul: b: expected shape [2, 3, 4], got [5, 3]");
    CHECK_THROWS_WITH(ag::matmul_transposed(x, w),
                      "headwise::autograd::matmul_transposed: b: expected shape [N, 4] (a's last "
                      "extent), got [5, 3]");
    CHECK_THROWS_WITH(ag::scale(Var<double>(), 2.0),
                      "headwise::autograd::scale: x: is an empty Var (made by no tape)");
    // Nothing was recorded by the failed calls.
    CHECK(tape.size() == 0);
}

TEST_CASE("Tape::parameter: a tied LM head adds into the embedding's gradient") {
    constexpr Index V = 7, E = 4, B = 2, L = 3;
    headwise::Generator rng(6), rng2(6), data(7);
    headwise::Embedding<double> emb(V, E, std::nullopt, rng), copy(V, E, std::nullopt, rng2);
    headwise::RMSNorm<double> norm(E), norm_copy(E);
    Tensor<std::int64_t> ids(Shape{B, L}), targets(Shape{B * L});
    for (Index i = 0; i < B * L; ++i) {
        ids.data()[i] = (3 * i + 1) % V;
        targets.data()[i] = (5 * i + 2) % V;
    }

    // On the tape: logits = norm(emb(ids)) E^T, E the embedding's own table.
    Tape<double> tape;
    headwise::Parameter<double> table = emb.parameters()[0];
    const Var<double> x = ag::apply(emb, tape, ids);                // [B, L, E]
    const Var<double> h = ag::apply(norm, x);                       // [B, L, E]
    const Var<double> w = tape.parameter(table.value, table.grad);  // [V, E], no copy
    CHECK(w.value().data() == table.value.data());
    const Var<double> logits = ag::reshape(ag::matmul_transposed(h, w), Shape{B * L, V});
    const Var<double> loss = ag::cross_entropy(logits, targets);
    tape.backward(loss);

    // By hand, in the tape's order: the head's dE first, then the embedding's own rows.
    headwise::Parameter<double> t2 = copy.parameters()[0];
    const Tensor<double> xh = copy.forward(ids);
    const Tensor<double> hh = norm_copy.forward(xh);
    Tensor<double> lg(Shape{B * L, V});
    lg.matrix().noalias() = hh.matrix() * t2.value.matrix().transpose();
    const auto ce = headwise::cross_entropy<double>(lg, targets);
    CHECK(loss.item() == ce.value);
    Tensor<double> dh(hh.shape());
    dh.matrix().noalias() = ce.grad.matrix() * t2.value.matrix();
    t2.grad.matrix().noalias() = ce.grad.matrix().transpose() * hh.matrix();
    const Tensor<double> dx = norm_copy.backward(xh, dh);
    copy.backward(ids, dx);
    CHECK(identical<double>(table.grad, t2.grad));
    CHECK(identical<double>(norm.grad_dict().at("weight"), norm_copy.grad_dict().at("weight")));

    SECTION("the parameter made first: its gradient adds to the embedding's rows") {
        emb.zero_grad();
        copy.zero_grad();
        norm.zero_grad();
        Tape<double> t;
        const Var<double> w2 = t.parameter(table.value, table.grad);  // before the embedding
        const Var<double> l2 = ag::cross_entropy(
            ag::reshape(ag::matmul_transposed(ag::apply(norm, ag::apply(emb, t, ids)), w2),
                        Shape{B * L, V}),
            targets);
        t.backward(l2);
        // Reverse order of recording: the embedding's backward runs first, then the parameter's.
        copy.backward(ids, dx);
        t2.grad.matrix() += ce.grad.matrix().transpose() * hh.matrix();
        CHECK(identical<double>(table.grad, t2.grad));
    }
    SECTION("gradcheck over h and the table") {
        Tensor<double> h0 = Tensor<double>::randn(Shape{B, L, E}, data);
        Tensor<double> e0 = Tensor<double>(table.value);
        headwise::Generator g(8);
        const auto f = [&](const std::vector<Tensor<double>>& in) {
            std::copy_n(in[1].data(), in[1].numel(), table.value.data());
            Tape<double> t(Tape<double>::no_grad);
            return Tensor<double>(
                ag::matmul_transposed(t.input(in[0]), t.parameter(table.value, table.grad))
                    .value());
        };
        const auto back = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& G) {
            std::copy_n(in[1].data(), in[1].numel(), table.value.data());
            emb.zero_grad();
            Tape<double> t;
            const Var<double> hv = t.input(in[0], true);
            t.backward(ag::matmul_transposed(hv, t.parameter(table.value, table.grad)), G);
            return std::vector<Tensor<double>>{t.grad(hv), Tensor<double>(table.grad)};
        };
        const auto r = headwise::gradcheck(f, back, {h0, e0}, g);
        CAPTURE(r.where);
        CHECK(r.ok);
        CHECK(r.checked == h0.numel() + e0.numel());
    }
    SECTION("no-grad mode leaves the gradient alone; shapes are checked") {
        emb.zero_grad();
        Tape<double> plain(Tape<double>::no_grad);
        const Var<double> p = plain.parameter(table.value, table.grad);
        CHECK(!p.recorded());
        Tensor<double> other(Shape{E, V});
        CHECK_THROWS_AS(tape.parameter(table.value, other), headwise::shape_error);
        CHECK_THROWS_WITH(tape.parameter(table.value, other),
                          "headwise::autograd::Tape::parameter: grad: expected shape [7, 4], got "
                          "[4, 7]");
        for (Index i = 0; i < table.grad.numel(); ++i) CHECK(table.grad.data()[i] == 0.0);
    }
}

}  // namespace test_tape_tensor_functions
