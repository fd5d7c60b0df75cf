// SPDX-License-Identifier: MIT
// Tests of headwise/layers/linear.hpp: the module's forward, backward, state dict and errors.
#include <headwise/layers/linear.hpp>

#include <headwise/compare.hpp>
#include <headwise/gradcheck.hpp>

#include <cmath>      // std::sqrt
#include <map>        // std::map
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/distribution.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_linear {

using headwise::Index;
using headwise::Linear;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
namespace reference = headwise::test::reference;

using headwise::test::dot_tolerance;
using headwise::test::identical;

namespace {

template <class T>
using StateDict = std::map<std::string, Tensor<T>>;

/// True when every element of `t` equals `value`.
template <class T>
bool all_equal(TensorView<const T> t, T value) {
    for (T v : t)
        if (v != value) return false;
    return true;
}

/// The expected input gradients of y = x W^T + b in double: dx = dy W, dW = dy^T x,
/// db = sum dy, over the rows of x [..., in] and dy [..., out].
struct LinearGrads {
    Tensor<double> dx, dW, db;
};
LinearGrads linear_grads_reference(const Tensor<double>& x, const Tensor<double>& W,
                                   const Tensor<double>& dy) {
    const Index out = W.size(0), in = W.size(1), N = x.numel() / in;
    LinearGrads g{Tensor<double>(x.shape()), Tensor<double>(W.shape()), Tensor<double>(Shape{out})};
    for (Index n = 0; n < N; ++n)
        for (Index o = 0; o < out; ++o) {
            const double d = dy.data()[n * out + o];
            g.db(o) += d;
            for (Index i = 0; i < in; ++i) {
                g.dx.data()[n * in + i] += d * W(o, i);
                g.dW(o, i) += d * x.data()[n * in + i];
            }
        }
    return g;
}

}  // namespace

TEMPLATE_TEST_CASE("Linear forward and backward match the reference for rank 1, 2 and 3",
                   "[linear]", float, double) {
    using T = TestType;
    const auto [B, L, in, out] = GENERATE(table<Index, Index, Index, Index>(
        {// B = 0: rank-1 input [in]; L = 0: rank-2 input [B, in]; else rank 3 [B, L, in]
         {0, 0, 5, 3},
         {0, 0, 1, 1},
         {4, 0, 7, 6},
         {2, 3, 8, 5},
         {3, 5, 33, 17}}));
    const bool bias = GENERATE(true, false);
    const Shape x_shape = B == 0 ? Shape{in} : L == 0 ? Shape{B, in} : Shape{B, L, in};
    Shape y_shape = x_shape;
    y_shape[y_shape.rank() - 1] = out;
    CAPTURE(x_shape, bias);

    std::mt19937_64 rng(42);
    Linear<T> fc(in, out, bias, rng);
    CHECK(fc.in_features() == in);
    CHECK(fc.out_features() == out);
    CHECK(fc.has_bias() == bias);
    const Tensor<T> x = Tensor<T>::randn(x_shape, rng);   // [..., in]
    const Tensor<T> dy = Tensor<T>::randn(y_shape, rng);  // [..., out]

    const Tensor<T> y = fc.forward(x);  // [..., out]
    CHECK(y.shape() == y_shape);
    const Tensor<double> W = reference::to_double<T>(fc.weight());  // [out, in]
    const Tensor<double> b = reference::to_double<T>(fc.bias());    // [out] or empty
    CHECK(b.numel() == (bias ? out : 0));
    HEADWISE_CHECK_CLOSE(y, reference::linear(reference::to_double<T>(x), W, b),
                         dot_tolerance<T>(in));

    const Tensor<T> dx = fc.backward(x, dy);  // [..., in]
    CHECK(dx.shape() == x_shape);
    const LinearGrads expected =
        linear_grads_reference(reference::to_double<T>(x), W, reference::to_double<T>(dy));
    const Index N = x.numel() / in;
    HEADWISE_CHECK_CLOSE(dx, expected.dx, dot_tolerance<T>(out));
    HEADWISE_CHECK_CLOSE(fc.grad_weight(), expected.dW, dot_tolerance<T>(N));
    if (bias) HEADWISE_CHECK_CLOSE(fc.grad_bias(), expected.db, dot_tolerance<T>(N));
    CHECK(fc.grad_bias().numel() == (bias ? out : 0));
}

TEMPLATE_TEST_CASE("Linear gradients accumulate across backwards until zero_grad", "[linear]",
                   float, double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    Linear<T> fc(6, 4, true, rng);
    const Tensor<T> x1 = Tensor<T>::randn(Shape{3, 6}, rng),
                    x2 = Tensor<T>::randn(Shape{5, 6}, rng);
    const Tensor<T> dy1 = Tensor<T>::randn(Shape{3, 4}, rng),
                    dy2 = Tensor<T>::randn(Shape{5, 4}, rng);
    const Tensor<double> W = reference::to_double<T>(fc.weight());

    CHECK(headwise::max_abs_diff(fc.grad_weight(), Tensor<T>(Shape{4, 6})).max_abs == 0.0);
    fc.backward(x1, dy1);
    fc.backward(x2, dy2);
    const LinearGrads g1 =
        linear_grads_reference(reference::to_double<T>(x1), W, reference::to_double<T>(dy1));
    const LinearGrads g2 =
        linear_grads_reference(reference::to_double<T>(x2), W, reference::to_double<T>(dy2));
    Tensor<double> dW_sum = g1.dW, db_sum = g1.db;
    for (Index i = 0; i < dW_sum.numel(); ++i) dW_sum.data()[i] += g2.dW.data()[i];
    for (Index i = 0; i < db_sum.numel(); ++i) db_sum.data()[i] += g2.db.data()[i];
    HEADWISE_CHECK_CLOSE(fc.grad_weight(), dW_sum, dot_tolerance<T>(8));
    HEADWISE_CHECK_CLOSE(fc.grad_bias(), db_sum, dot_tolerance<T>(8));

    fc.zero_grad();
    CHECK(all_equal<T>(fc.grad_weight(), T(0)));
    CHECK(all_equal<T>(fc.grad_bias(), T(0)));
    fc.backward(x2, dy2);
    HEADWISE_CHECK_CLOSE(fc.grad_weight(), g2.dW, dot_tolerance<T>(5));
    HEADWISE_CHECK_CLOSE(fc.grad_bias(), g2.db, dot_tolerance<T>(5));
}

TEMPLATE_TEST_CASE("Linear forward_into writes and backward_into adds", "[linear]", float, double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    Linear<T> fc(5, 3, true, rng);
    const Tensor<T> x = Tensor<T>::randn(Shape{2, 4, 5}, rng);   // [B, L, in]
    const Tensor<T> dy = Tensor<T>::randn(Shape{2, 4, 3}, rng);  // [B, L, out]

    Tensor<T> y = Tensor<T>::full(Shape{2, 4, 3}, T(8));  // [B, L, out], overwritten
    fc.forward_into(x, y);
    CHECK(identical<T>(y, fc.forward(x)));

    const Tensor<T> dx = fc.backward(x, dy);              // [B, L, in]
    Tensor<T> dx_acc = Tensor<T>::full(x.shape(), T(1));  // [B, L, in], e.g. a residual's
    fc.backward_into(x, dy, dx_acc);
    Tensor<double> expected = reference::to_double<T>(dx);
    for (double& v : expected) v += 1.0;
    HEADWISE_CHECK_CLOSE(dx_acc, expected, dot_tolerance<T>(3));
}

TEMPLATE_TEST_CASE("Linear initialises as PyTorch: U(-1/sqrt(in), 1/sqrt(in)), weight first",
                   "[linear]", float, double) {
    using T = TestType;
    const bool bias = GENERATE(true, false);
    CAPTURE(bias);
    std::mt19937_64 rng(42);
    Linear<T> fc(400, 256, bias, rng);  // bound 1/20
    const std::string why = headwise::test::uniform_mismatch<T>(fc.weight(), 1.0 / 20.0);
    INFO(why);
    CHECK(why.empty());
    CHECK(all_equal<T>(fc.grad_weight(), T(0)));

    // The same numbers as drawing by hand: kaiming_uniform_(a = sqrt(5)), then the bias.
    std::mt19937_64 replay(42);
    Tensor<T> W(Shape{256, 400}), b(Shape{256});
    headwise::kaiming_uniform_(W, std::sqrt(5.0), replay);
    CHECK(identical<T>(fc.weight(), W));
    if (bias) {
        headwise::uniform_(b, -1.0 / 20.0, 1.0 / 20.0, replay);
        CHECK(identical<T>(fc.bias(), b));
        CHECK(all_equal<T>(fc.grad_bias(), T(0)));
    }
    CHECK(rng() == replay());  // no other draws

    // The bias has too few values for the moment checks; its range is checked directly.
    std::mt19937_64 rng2(7);
    Linear<T> wide(16, 20000, true, rng2);  // bound 1/4
    const std::string why_bias = headwise::test::uniform_mismatch<T>(wide.bias(), 0.25);
    INFO(why_bias);
    CHECK(why_bias.empty());
}

TEMPLATE_TEST_CASE("Linear state_dict uses PyTorch's names and load_state_dict round-trips",
                   "[linear]", float, double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    Linear<T> a(4, 3, true, rng), b(4, 3, true, rng);
    const StateDict<T> state = a.state_dict();
    REQUIRE(state.size() == 2);
    CHECK(state.at("weight").shape() == Shape{3, 4});
    CHECK(state.at("bias").shape() == Shape{3});
    CHECK(identical<T>(state.at("weight"), a.weight()));
    CHECK(identical<T>(state.at("bias"), a.bias()));

    // Views taken before the load see the loaded values (same buffers).
    const TensorView<const T> b_weight = b.weight();
    CHECK(!identical<T>(b_weight, a.weight()));
    b.load_state_dict(state);
    CHECK(identical<T>(b_weight, a.weight()));
    CHECK(identical<T>(b.bias(), a.bias()));
    const Tensor<T> x = Tensor<T>::randn(Shape{2, 4}, rng);
    CHECK(identical<T>(b.forward(x), a.forward(x)));

    // The state dict holds copies.
    StateDict<T> copy = a.state_dict();
    copy.at("weight").fill(T(0));
    CHECK(a.weight()(0, 0) != T(0));

    // grad_dict: the same names over the gradients.
    a.backward(x, Tensor<T>::ones(Shape{2, 3}));
    const StateDict<T> grads = a.grad_dict();
    REQUIRE(grads.size() == 2);
    CHECK(identical<T>(grads.at("weight"), a.grad_weight()));
    CHECK(identical<T>(grads.at("bias"), a.grad_bias()));
    CHECK(grads.at("bias")(0) == T(2));  // sum over 2 rows of ones

    Linear<T> no_bias(4, 3, false, rng);
    CHECK(no_bias.state_dict().size() == 1);
    CHECK(no_bias.state_dict().count("weight") == 1);
    CHECK(no_bias.grad_dict().size() == 1);
    CHECK(no_bias.bias().numel() == 0);
    no_bias.load_state_dict(StateDict<T>{{"weight", state.at("weight")}});
    CHECK(identical<T>(no_bias.weight(), a.weight()));
}

TEMPLATE_TEST_CASE("Linear load_state_dict is strict and changes nothing on error", "[linear]",
                   float, double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    Linear<T> fc(4, 3, true, rng);
    const StateDict<T> before = fc.state_dict();
    const Tensor<T> W_new = Tensor<T>::randn(Shape{3, 4}, rng);

    // Missing bias, with a valid weight that must not be applied.
    CHECK_THROWS_MATCHES(fc.load_state_dict(StateDict<T>{{"weight", W_new}}), std::invalid_argument,
                         Message("headwise::Linear::load_state_dict: bias: missing from the "
                                 "state dict, expected shape [3]"));
    // Mis-shaped entry.
    CHECK_THROWS_MATCHES(
        fc.load_state_dict(StateDict<T>{{"weight", W_new}, {"bias", Tensor<T>(Shape{4})}}),
        headwise::shape_error,
        Message("headwise::Linear::load_state_dict: bias: expected shape [3], got [4]"));
    CHECK_THROWS_MATCHES(
        fc.load_state_dict(
            StateDict<T>{{"weight", Tensor<T>(Shape{4, 3})}, {"bias", before.at("bias")}}),
        headwise::shape_error,
        Message("headwise::Linear::load_state_dict: weight: expected shape [3, 4], got [4, 3]"));
    // Unexpected entry.
    CHECK_THROWS_MATCHES(
        fc.load_state_dict(StateDict<T>{
            {"weight", W_new}, {"bias", before.at("bias")}, {"bias_k", Tensor<T>(Shape{1, 1, 3})}}),
        std::invalid_argument,
        Message("headwise::Linear::load_state_dict: bias_k: unexpected key in the state dict "
                "(shape [1, 1, 3]); expected keys: weight, bias"));
    CHECK(identical<T>(fc.weight(), before.at("weight")));
    CHECK(identical<T>(fc.bias(), before.at("bias")));

    Linear<T> no_bias(4, 3, false, rng);
    const Tensor<T> W_before(no_bias.weight());
    CHECK_THROWS_MATCHES(
        no_bias.load_state_dict(StateDict<T>{{"weight", W_new}, {"bias", Tensor<T>(Shape{3})}}),
        std::invalid_argument,
        Message("headwise::Linear::load_state_dict: bias: unexpected key in the state dict "
                "(shape [3]); expected keys: weight"));
    CHECK(identical<T>(no_bias.weight(), W_before));
}

TEMPLATE_TEST_CASE("Linear rejects bad shapes before any state changes", "[linear]", float,
                   double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    Linear<T> fc(5, 3, true, rng);
    const Tensor<T> x(Shape{2, 5}), x_bad(Shape{2, 4}), scalar(Shape{});
    const Tensor<T> dy = Tensor<T>::ones(Shape{2, 3}), dy_bad = Tensor<T>::ones(Shape{2, 4});

    CHECK_THROWS_MATCHES(fc.forward(x_bad), headwise::shape_error,
                         Message("headwise::Linear::forward: input: expected shape [..., 5], got "
                                 "[2, 4]"));
    CHECK_THROWS_MATCHES(fc.forward(scalar), headwise::shape_error,
                         Message("headwise::Linear::forward: input: expected shape [..., 5], got "
                                 "[]"));
    Tensor<T> y_bad(Shape{3, 2});
    CHECK_THROWS_MATCHES(fc.forward_into(x, y_bad), headwise::shape_error,
                         Message("headwise::Linear::forward_into: output: expected shape [2, 3], "
                                 "got [3, 2]"));
    CHECK_THROWS_MATCHES(fc.backward(x_bad, dy), headwise::shape_error,
                         Message("headwise::Linear::backward: input: expected shape [..., 5], got "
                                 "[2, 4]"));
    CHECK_THROWS_MATCHES(fc.backward(x, dy_bad), headwise::shape_error,
                         Message("headwise::Linear::backward: grad_output: expected shape [2, 3], "
                                 "got [2, 4]"));
    Tensor<T> dx_bad(Shape{2, 3});
    CHECK_THROWS_MATCHES(fc.backward_into(x, dy, dx_bad), headwise::shape_error,
                         Message("headwise::Linear::backward_into: grad_input: expected shape "
                                 "[2, 5], got [2, 3]"));
    CHECK(all_equal<T>(dx_bad, T(0)));
    // None of the failed backwards touched the gradients.
    CHECK(all_equal<T>(fc.grad_weight(), T(0)));
    CHECK(all_equal<T>(fc.grad_bias(), T(0)));
}

TEST_CASE("Linear rejects non-positive sizes", "[linear]") {
    std::mt19937_64 rng(42);
    CHECK_THROWS_MATCHES(Linear<float>(0, 3, true, rng), std::invalid_argument,
                         Message("headwise::Linear::Linear: in_features: must be positive, got 0"));
    CHECK_THROWS_MATCHES(Linear<double>(3, -2, false, rng), std::invalid_argument,
                         Message("headwise::Linear::Linear: out_features: must be positive, got "
                                 "-2"));
}

TEST_CASE("Linear passes a central-difference gradient check over x, weight and bias",
          "[linear][gradcheck]") {
    const auto [rows, in, out] =
        GENERATE(table<Index, Index, Index>({{1, 1, 1}, {3, 4, 5}, {6, 7, 2}}));
    CAPTURE(rows, in, out);
    std::mt19937_64 rng(42);
    Linear<double> fc(in, out, true, rng);
    const std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{2, rows, in}, rng),
                                             Tensor<double>(fc.weight()),
                                             Tensor<double>(fc.bias())};
    const auto load = [&fc](const std::vector<Tensor<double>>& v) {
        fc.load_state_dict(StateDict<double>{{"weight", v[1]}, {"bias", v[2]}});
    };
    const auto forward = [&](const std::vector<Tensor<double>>& v) {
        load(v);
        return fc.forward(v[0]);
    };
    const auto backward = [&](const std::vector<Tensor<double>>& v, const Tensor<double>& dy) {
        load(v);
        fc.zero_grad();
        Tensor<double> dx = fc.backward(v[0], dy);
        return std::vector<Tensor<double>>{std::move(dx), Tensor<double>(fc.grad_weight()),
                                           Tensor<double>(fc.grad_bias())};
    };
    const headwise::GradcheckResult result = headwise::gradcheck(forward, backward, inputs, rng);
    INFO("max relative error " << result.max_rel_error << " at " << result.where);
    CHECK(result.ok);
    CHECK(result.max_rel_error <= 1e-6);
    CHECK(result.checked == inputs[0].numel() + inputs[1].numel() + inputs[2].numel());
}

}  // namespace test_linear
