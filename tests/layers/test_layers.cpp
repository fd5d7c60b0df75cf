// SPDX-License-Identifier: MIT
// Tests of the small layers: LayerNorm, ReLU, GELU, Dropout, Embedding — torch golden parity,
// gradcheck, the module contract and the errors.
#include <headwise/gradcheck.hpp>
#include <headwise/layers/dropout.hpp>
#include <headwise/layers/embedding.hpp>
#include <headwise/layers/gelu.hpp>
#include <headwise/layers/layer_norm.hpp>
#include <headwise/layers/relu.hpp>

#include <cmath>      // std::isnan, std::isfinite
#include <cstdint>    // std::int64_t
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument, std::out_of_range
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"
#include "support/training_golden.hpp"

namespace test_layers {

using namespace headwise;
using headwise::test::cast;
using headwise::test::load_training_case;
using headwise::test::TrainingCase;

namespace {

/// Relative tolerance against torch's float64 results: double agrees to rounding, float to a
/// few units of its rounding.
template <class T>
constexpr double golden_tol() {
    return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

/// Copies `sd` entries into a module's parameters by name (its load_state_dict, in T).
template <class T, class M>
void load(M& module, const TrainingCase& c, const std::vector<std::string>& names) {
    StateDict<T> sd;
    for (const std::string& n : names) sd.emplace(n, cast<T>(c.at(n)));
    module.load_state_dict(sd);
}

}  // namespace

// ---- LayerNorm ---------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("LayerNorm matches torch in output and every gradient", "[layers][golden]",
                   float, double) {
    using T = TestType;
    const std::string name = GENERATE("layer_norm_affine", "layer_norm_plain");
    CAPTURE(name);
    const TrainingCase c = load_training_case(name);
    const bool affine = c.number("affine") != 0;
    LayerNorm<T> ln(static_cast<Index>(c.number("features")), c.number("eps"), affine);
    if (affine) load<T>(ln, c, {"weight", "bias"});
    const Tensor<T> x = cast<T>(c.at("x"));
    HEADWISE_CHECK_CLOSE(ln.forward(x), c.at("output"), golden_tol<T>());
    const Tensor<T> dx = ln.backward(x, cast<T>(c.at("grad_output")));
    HEADWISE_CHECK_CLOSE(dx, c.at("grad_x"), golden_tol<T>());
    const StateDict<T> g = ln.grad_dict();
    CHECK(g.size() == (affine ? 2u : 0u));
    if (affine) {
        HEADWISE_CHECK_CLOSE(g.at("weight"), c.at("grad/weight"), golden_tol<T>());
        HEADWISE_CHECK_CLOSE(g.at("bias"), c.at("grad/bias"), golden_tol<T>());
    }
}

TEST_CASE("LayerNorm passes gradcheck for the input, weight and bias", "[layers][gradcheck]") {
    Generator rng(11);
    const Tensor<double> x = Tensor<double>::randn(Shape{2, 3, 5}, rng);
    const Tensor<double> w = Tensor<double>::randn(Shape{5}, rng);
    const Tensor<double> b = Tensor<double>::randn(Shape{5}, rng);
    auto make = [](const std::vector<Tensor<double>>& in) {
        LayerNorm<double> ln(5, 1e-5);
        ln.load_state_dict({{"weight", in[1]}, {"bias", in[2]}});
        return ln;
    };
    const auto f = [&](const std::vector<Tensor<double>>& in) { return make(in).forward(in[0]); };
    const auto back = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
        LayerNorm<double> ln = make(in);
        Tensor<double> dx = ln.backward(in[0], dy);
        StateDict<double> g = ln.grad_dict();
        return std::vector<Tensor<double>>{std::move(dx), g.at("weight"), g.at("bias")};
    };
    const GradcheckResult r = gradcheck(f, back, {x, w, b}, rng, {1e-5, 1e-7});
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 30 + 5 + 5);  // every input, weight and bias entry
}

TEST_CASE("LayerNorm normalises each row and is a module", "[layers]") {
    LayerNorm<double> ln(4, 0.0);
    CHECK(ln.parameter_count() == 8);
    CHECK(ln.parameters().at(0).name == "weight");
    const Tensor<double> x(Shape{2, 4}, {1, 2, 3, 4, -10, 0, 10, 20});
    const Tensor<double> y = ln.forward(x);
    for (Index r = 0; r < 2; ++r) {
        double mean = 0, var = 0;
        for (Index c = 0; c < 4; ++c) mean += y(r, c) / 4;
        for (Index c = 0; c < 4; ++c) var += (y(r, c) - mean) * (y(r, c) - mean) / 4;
        CHECK_THAT(mean, WithinAbs(0.0, 1e-15));
        CHECK_THAT(var, WithinRel(1.0, 1e-14));
    }
    // A constant row with eps = 0 would divide by zero; with eps > 0 it maps to the bias.
    LayerNorm<float> ln2(3);
    const Tensor<float> flat = ln2.forward(Tensor<float>::full(Shape{1, 3}, 7.0f));
    for (float v : flat) CHECK(v == 0.0f);
}

TEST_CASE("LayerNorm errors name the function, the argument and the shapes", "[layers][errors]") {
    LayerNorm<float> ln(4);
    CHECK_THROWS_MATCHES(ln.forward(Tensor<float>(Shape{2, 3})), shape_error,
                         Message("headwise::LayerNorm::forward: input: expected shape [..., 4], "
                                 "got [2, 3]"));
    CHECK_THROWS_MATCHES(ln.backward(Tensor<float>(Shape{2, 4}), Tensor<float>(Shape{4, 2})),
                         shape_error,
                         Message("headwise::LayerNorm::backward: grad_output: expected shape "
                                 "[2, 4], got [4, 2]"));
    CHECK_THROWS_MATCHES(LayerNorm<float>(0), std::invalid_argument,
                         Message("headwise::LayerNorm::LayerNorm: normalized_shape: must be "
                                 "positive, got 0"));
    CHECK_THROWS_AS(LayerNorm<float>(3, -1.0), std::invalid_argument);
}

// ---- ReLU and GELU
// -------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ReLU and GELU match torch in output and gradient", "[layers][golden]", float,
                   double) {
    using T = TestType;
    const std::string name = GENERATE("relu", "gelu_erf", "gelu_tanh");
    CAPTURE(name);
    const TrainingCase c = load_training_case(name);
    const Tensor<T> x = cast<T>(c.at("x"));
    const Tensor<T> dy = cast<T>(c.at("grad_output"));
    Tensor<T> y, dx;
    if (name == "relu") {
        const ReLU<T> relu;
        y = relu.forward(x);
        dx = relu.backward(x, dy);
    } else {
        const GELU<T> gelu(c.number("tanh") != 0 ? GeluApproximation::tanh
                                                 : GeluApproximation::none);
        y = gelu.forward(x);
        dx = gelu.backward(x, dy);
    }
    HEADWISE_CHECK_CLOSE(y, c.at("output"), golden_tol<T>());
    HEADWISE_CHECK_CLOSE(dx, c.at("grad_x"), golden_tol<T>());
}

TEST_CASE("GELU passes gradcheck in both forms", "[layers][gradcheck]") {
    const GeluApproximation form = GENERATE(GeluApproximation::none, GeluApproximation::tanh);
    CAPTURE(static_cast<int>(form));
    Generator rng(3);
    const Tensor<double> x = Tensor<double>::uniform(Shape{4, 6}, -4.0, 4.0, rng);
    const GELU<double> gelu(form);
    const GradcheckResult r =
        gradcheck([&](const std::vector<Tensor<double>>& in) { return gelu.forward(in[0]); },
                  [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
                      return std::vector<Tensor<double>>{gelu.backward(in[0], dy)};
                  },
                  {x}, rng, {1e-5, 1e-7});
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 24);
}

TEST_CASE("ReLU passes gradcheck away from the kink", "[layers][gradcheck]") {
    Generator rng(4);
    Tensor<double> x = Tensor<double>::randn(Shape{3, 5}, rng);
    for (double& v : x) v += v > 0 ? 0.1 : -0.1;  // no element within eps of 0
    const ReLU<double> relu;
    const GradcheckResult r =
        gradcheck([&](const std::vector<Tensor<double>>& in) { return relu.forward(in[0]); },
                  [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
                      return std::vector<Tensor<double>>{relu.backward(in[0], dy)};
                  },
                  {x}, rng);
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 15);
}

// ---- Dropout
// -------------------------------------------------------------------------------------

TEST_CASE("Dropout keeps 1 - p of the entries, scaled, and backward regenerates the mask",
          "[layers][dropout]") {
    const double p = GENERATE(0.1, 0.5);
    CAPTURE(p);
    Dropout<double> drop(p, 123);
    const Tensor<double> x = Tensor<double>::full(Shape{100, 200}, 3.0);
    const DropoutForward<double> f = drop.forward(x);
    CHECK(f.applied);
    Index kept = 0;
    for (double v : f.output) {
        if (v != 0.0) {
            ++kept;
            CHECK_THAT(v, WithinRel(3.0 / (1.0 - p), 1e-15));
        }
    }
    CHECK_THAT(static_cast<double>(kept) / 20000.0, WithinAbs(1.0 - p, 0.015));
    const Tensor<double> dx = drop.backward(f, Tensor<double>::ones(x.shape()));
    for (Index i = 0; i < x.numel(); ++i)
        CHECK(dx.data()[i] == (f.output.data()[i] != 0.0 ? 1.0 / (1.0 - p) : 0.0));
    // The next call draws another mask; a copy of the module draws the same masks.
    Dropout<double> copy = drop;
    const DropoutForward<double> g = drop.forward(x), h = copy.forward(x);
    CHECK_FALSE(test::identical(f.output, g.output));
    CHECK(test::identical(g.output, h.output));
}

TEST_CASE("Dropout is the identity in eval mode and with p = 0, zero with p = 1",
          "[layers][dropout]") {
    Generator rng(5);
    const Tensor<float> x = Tensor<float>::randn(Shape{4, 5}, rng);
    Dropout<float> drop(0.5, 1);
    drop.eval();
    DropoutForward<float> f = drop.forward(x);
    CHECK_FALSE(f.applied);
    CHECK(test::identical(f.output, x));
    CHECK(test::identical(drop.backward(f, x), x));
    Dropout<float> none(0.0, 1);
    CHECK(test::identical(none.forward(x).output, x));
    Dropout<float> all(1.0, 1);
    for (float v : all.forward(x).output) CHECK(v == 0.0f);
    CHECK_THROWS_MATCHES(Dropout<float>(1.5), std::invalid_argument,
                         Message("headwise::Dropout::Dropout: p: must be in [0, 1], got 1.500000"));
    CHECK_THROWS_AS(drop.backward(f, Tensor<float>(Shape{5, 4})), shape_error);
}

TEMPLATE_TEST_CASE("Dropout keeps NaN and inf as its kernel does, forward and backward",
                   "[layers][dropout]", float, double) {
    // ops::dropout_apply multiplies every entry by 0 (dropped) or 1 / (1 - p) (kept), so a
    // dropped NaN or inf becomes NaN (as in torch), never 0; p = 1 drops every entry.
    using T = TestType;
    using limits = std::numeric_limits<T>;
    const double p = GENERATE(1.0, 0.5);
    CAPTURE(p);
    const T specials[] = {limits::quiet_NaN(), limits::infinity(), -limits::infinity(), T(1.5)};
    Tensor<T> x(Shape{8, 5});  // [8, 5]
    for (Index i = 0; i < x.numel(); ++i) x.data()[i] = specials[i % 4];
    const Dropout<T> drop(p, 9);
    // The mask, read off a copy of the module (same stream) applied to ones: 0 or 1 / (1 - p).
    Dropout<T> probe = drop;
    const Tensor<T> mask = probe.forward(Tensor<T>::ones(x.shape())).output;  // [8, 5]
    const auto same = [](T a, T b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
    Dropout<T> d = drop;
    const DropoutForward<T> f = d.forward(x);
    const Tensor<T> dx = d.backward(f, x);  // the specials as the upstream gradient too
    Index dropped_special = 0;
    for (Index i = 0; i < x.numel(); ++i) {
        CAPTURE(i, x.data()[i], mask.data()[i]);
        const T expected = x.data()[i] * mask.data()[i];
        CHECK(same(f.output.data()[i], expected));
        CHECK(same(dx.data()[i], expected));
        if (mask.data()[i] == T(0) && !std::isfinite(x.data()[i])) ++dropped_special;
    }
    CHECK(dropped_special > 0);  // the case the rule is about was reached
}

TEST_CASE("Dropout passes gradcheck with its mask fixed by the stream", "[layers][gradcheck]") {
    Generator rng(6);
    const Tensor<double> x = Tensor<double>::randn(Shape{6, 7}, rng);
    const Dropout<double> drop(0.4, 77);
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor<double>>& in) {
            Dropout<double> d = drop;  // same state: same stream, same mask
            return d.forward(in[0]).output;
        },
        [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
            Dropout<double> d = drop;
            return std::vector<Tensor<double>>{d.backward(d.forward(in[0]), dy)};
        },
        {x}, rng);
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 42);
}

// ---- Embedding
// -----------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("Embedding matches torch, padding row included", "[layers][golden]", float,
                   double) {
    using T = TestType;
    const TrainingCase c = load_training_case("embedding_padding");
    Generator rng(1);
    Embedding<T> emb(7, 4, Index{2}, rng);
    for (Index e = 0; e < 4; ++e) CHECK(emb.weight()(2, e) == T(0));  // torch zeroes the row
    load<T>(emb, c, {"weight"});
    const Tensor<std::int64_t> idx = c.indices("x");
    HEADWISE_CHECK_CLOSE(emb.forward(idx), c.at("output"), golden_tol<T>());
    emb.backward(idx, cast<T>(c.at("grad_output")));
    HEADWISE_CHECK_CLOSE(emb.grad_dict().at("weight"), c.at("grad/weight"), golden_tol<T>());
    for (Index e = 0; e < 4; ++e) CHECK(emb.grad_dict().at("weight")(2, e) == T(0));
}

TEST_CASE("Embedding passes gradcheck for its weight", "[layers][gradcheck]") {
    Generator rng(8);
    const Tensor<std::int64_t> idx(Shape{2, 3}, {0, 4, 4, 1, 3, 0});
    const Tensor<double> w = Tensor<double>::randn(Shape{5, 3}, rng);
    auto make = [](const Tensor<double>& weight) {
        Generator unused(0);
        Embedding<double> emb(5, 3, std::nullopt, unused);
        emb.load_state_dict({{"weight", weight}});
        return emb;
    };
    const GradcheckResult r =
        gradcheck([&](const std::vector<Tensor<double>>& in) { return make(in[0]).forward(idx); },
                  [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
                      Embedding<double> emb = make(in[0]);
                      emb.backward(idx, dy);
                      return std::vector<Tensor<double>>{emb.grad_dict().at("weight")};
                  },
                  {w}, rng);
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 15);
}

TEST_CASE("Embedding gradients accumulate and errors name the entry", "[layers][errors]") {
    Generator rng(9);
    Embedding<float> emb(4, 2, std::nullopt, rng);
    const Tensor<std::int64_t> idx(Shape{3}, {1, 1, 3});
    emb.backward(idx, Tensor<float>::ones(Shape{3, 2}));
    CHECK(emb.grad_dict().at("weight")(1, 0) == 2.0f);
    CHECK(emb.grad_dict().at("weight")(0, 0) == 0.0f);
    const Tensor<std::int64_t> bad(Shape{2}, {1, 4});
    CHECK_THROWS_MATCHES(emb.forward(bad), std::out_of_range,
                         Message("headwise::Embedding::forward: indices: entry 1 (flat) is 4, "
                                 "expected an index in [0, 4)"));
    CHECK_THROWS_MATCHES(emb.backward(idx, Tensor<float>(Shape{3, 3})), shape_error,
                         Message("headwise::Embedding::backward: grad_output: expected shape "
                                 "[3, 2], got [3, 3]"));
    CHECK_THROWS_AS(Embedding<float>(4, 2, Index{4}, rng), std::invalid_argument);
}

TEST_CASE("Embedding refuses indices of the largest rank, naming itself", "[layers][errors]") {
    // The output [..., embedding_dim] has one axis more than the indices: rank-8 indices would
    // need a rank-9 output, one more than a tensor has.
    Generator rng(9);
    Embedding<float> emb(4, 2, std::nullopt, rng);
    const Tensor<std::int64_t> idx(Shape{1, 1, 1, 1, 1, 1, 1, 2});  // rank 8, entries 0
    CHECK_THROWS_MATCHES(emb.forward(idx), shape_error,
                         Message("headwise::Embedding::forward: indices: expected shape of rank "
                                 "at most 7 (the output adds the embedding axis, and a tensor "
                                 "has at most 8), got [1, 1, 1, 1, 1, 1, 1, 2]"));
    const Tensor<float> dy(Shape{1, 1, 1, 1, 1, 1, 1, 2});
    CHECK_THROWS_MATCHES(emb.backward(idx, dy), shape_error,
                         Message("headwise::Embedding::backward: indices: expected shape of rank "
                                 "at most 7 (the output adds the embedding axis, and a tensor "
                                 "has at most 8), got [1, 1, 1, 1, 1, 1, 1, 2]"));
    // Rank 7 is the largest that fits.
    const Tensor<std::int64_t> seven(Shape{1, 1, 1, 1, 1, 1, 3});
    CHECK(emb.forward(seven).shape() == Shape{1, 1, 1, 1, 1, 1, 3, 2});
}

}  // namespace test_layers
