// SPDX-License-Identifier: MIT
// Tests of headwise/gradcheck.hpp: correct backwards pass, wrong ones are caught and located.
#include <headwise/gradcheck.hpp>
#include <headwise/tensor_ops/elementwise.hpp>
#include <headwise/tensor_ops/matmul.hpp>

#include <cmath>      // std::exp
#include <limits>     // std::numeric_limits
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <tuple>      // std::tuple
#include <vector>     // std::vector

#include "support/catch.hpp"

namespace test_gradcheck {

using headwise::GradcheckOptions;
using headwise::GradcheckResult;
using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using Inputs = std::vector<Tensor<double>>;

namespace {

// ---- f(A, B) = A B and its backward -----------------------------------------------------------

Tensor<double> matmul_forward(const Inputs& x) { return headwise::matmul(x[0], x[1]); }

/// From C = A B: dA = dC B^T, dB = A^T dC.
Inputs matmul_backward(const Inputs& x, const Tensor<double>& dC) {
    return {headwise::matmul(dC, x[1], false, true), headwise::matmul(x[0], dC, true, false)};
}

// ---- f(a, b, c) = a ⊙ b + exp(c) -----------------------------------------------------------

Tensor<double> product_forward(const Inputs& x) { return x[0] * x[1] + headwise::exp(x[2]); }

Inputs product_backward(const Inputs& x, const Tensor<double>& dY) {
    return {dY * x[1], dY * x[0], dY * headwise::exp(x[2])};
}

// ---- f(X) = softmax over the last axis, written out -----------------------------------------

/// P[r, :] = exp(X[r, :] - max) / sum; the max is subtracted so exp never overflows (it cancels
/// between numerator and denominator).
Tensor<double> softmax_forward(const Inputs& x) {
    const Tensor<double>& X = x[0];  // [R, C]
    const Index R = X.size(0), C = X.size(1);
    Tensor<double> P(X.shape());  // [R, C]
    for (Index r = 0; r < R; ++r) {
        double m = -std::numeric_limits<double>::infinity();
        for (Index c = 0; c < C; ++c) m = X(r, c) > m ? X(r, c) : m;
        double sum = 0.0;
        for (Index c = 0; c < C; ++c) sum += P(r, c) = std::exp(X(r, c) - m);
        for (Index c = 0; c < C; ++c) P(r, c) /= sum;
    }
    return P;
}

/// dX = P ⊙ (dP - rowsum(dP ⊙ P)), the softmax Jacobian-vector product.
Inputs softmax_backward(const Inputs& x, const Tensor<double>& dP) {
    const Tensor<double> P = softmax_forward(x);  // [R, C]
    Tensor<double> dX(P.shape());                 // [R, C]
    for (Index r = 0; r < P.size(0); ++r) {
        double dot = 0.0;
        for (Index c = 0; c < P.size(1); ++c) dot += dP(r, c) * P(r, c);
        for (Index c = 0; c < P.size(1); ++c) dX(r, c) = P(r, c) * (dP(r, c) - dot);
    }
    return {dX};
}

Inputs random_inputs(std::mt19937_64& rng, const std::vector<Shape>& shapes) {
    Inputs x;
    for (const Shape& s : shapes) x.push_back(Tensor<double>::randn(s, rng));
    return x;
}

}  // namespace

TEST_CASE("gradcheck passes correct backwards", "[gradcheck]") {
    const auto [m, k, n] = GENERATE(table<Index, Index, Index>({{1, 1, 1}, {2, 3, 4}, {5, 7, 3}}));
    CAPTURE(m, k, n);
    std::mt19937_64 rng(42);

    const Inputs ab = random_inputs(rng, {Shape{m, k}, Shape{k, n}});
    const GradcheckResult mm = headwise::gradcheck(matmul_forward, matmul_backward, ab, rng);
    INFO(mm.where);
    CHECK(mm.ok);
    CHECK(mm.max_rel_error < 1e-6);
    CHECK(mm.checked == m * k + k * n);

    const Inputs abc = random_inputs(rng, {Shape{m, k, n}, Shape{m, k, n}, Shape{m, k, n}});
    const GradcheckResult prod = headwise::gradcheck(product_forward, product_backward, abc, rng);
    INFO(prod.where);
    CHECK(prod.ok);
    CHECK(prod.checked == 3 * m * k * n);

    const Inputs s = random_inputs(rng, {Shape{m, k + 1}});
    const GradcheckResult sm = headwise::gradcheck(softmax_forward, softmax_backward, s, rng);
    INFO(sm.where);
    CHECK(sm.ok);
    CHECK(sm.checked == m * (k + 1));
    CHECK(sm.max_abs_error < 1e-8);
}

TEST_CASE("gradcheck catches a wrong backward and says where", "[gradcheck]") {
    std::mt19937_64 rng(42);
    const Inputs ab = random_inputs(rng, {Shape{3, 4}, Shape{4, 2}});

    // dB off by a factor 2 everywhere: relative error 1/2 at every partial of input 1.
    const auto doubled = [](const Inputs& x, const Tensor<double>& dC) {
        Inputs g = matmul_backward(x, dC);
        g[1] *= 2.0;
        return g;
    };
    const GradcheckResult r = headwise::gradcheck(matmul_forward, doubled, ab, rng);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.max_rel_error, WithinAbs(0.5, 1e-6));
    CHECK_THAT(r.where, StartsWith("input 1 ["));
    CHECK(r.checked == 12 + 8);

    // One partial of dA slightly wrong: found, named by its multi-index.
    const auto one_off = [](const Inputs& x, const Tensor<double>& dC) {
        Inputs g = matmul_backward(x, dC);
        g[0](1, 2) += 1e-3;
        return g;
    };
    const GradcheckResult o = headwise::gradcheck(matmul_forward, one_off, ab, rng);
    CHECK_FALSE(o.ok);
    CHECK(o.max_rel_error > 1e-5);
    CHECK_THAT(o.max_abs_error, WithinRel(1e-3, 1e-4));
    CHECK_THAT(o.where, StartsWith("input 0 [1, 2]: analytic "));
    CHECK_THAT(o.where, ContainsSubstring(", numeric "));

    // A transposed gradient (a classic slip): dA = B dC^T has the wrong shape.
    const auto transposed = [](const Inputs& x, const Tensor<double>& dC) {
        return Inputs{headwise::matmul(x[1], dC, false, true), headwise::matmul(x[0], dC, true)};
    };
    REQUIRE_THROWS_AS(headwise::gradcheck(matmul_forward, transposed, ab, rng),
                      headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::gradcheck(matmul_forward, transposed, ab, rng),
                        "headwise::gradcheck: backward result 0: expected shape [3, 4], got "
                        "[4, 3]");

    // Softmax backward that forgets the rowsum term.
    const auto no_rowsum = [](const Inputs& x, const Tensor<double>& dP) {
        return Inputs{softmax_forward(x) * dP};
    };
    const GradcheckResult s =
        headwise::gradcheck(softmax_forward, no_rowsum, random_inputs(rng, {Shape{3, 5}}), rng);
    CHECK_FALSE(s.ok);
    CHECK(s.max_rel_error > 0.01);
    CHECK_THAT(s.where, StartsWith("input 0 ["));
}

TEST_CASE("gradcheck flags NaN gradients", "[gradcheck]") {
    std::mt19937_64 rng(42);
    const auto nan_grad = [](const Inputs& x, const Tensor<double>& dC) {
        Inputs g = matmul_backward(x, dC);
        g[1](0, 1) = std::numeric_limits<double>::quiet_NaN();
        return g;
    };
    const GradcheckResult r = headwise::gradcheck(
        matmul_forward, nan_grad, random_inputs(rng, {Shape{2, 2}, Shape{2, 2}}), rng);
    CHECK_FALSE(r.ok);
    CHECK(r.max_rel_error == std::numeric_limits<double>::infinity());
    CHECK(r.max_abs_error == std::numeric_limits<double>::infinity());
    CHECK_THAT(r.where, StartsWith("input 1 [0, 1]: analytic nan"));
}

TEST_CASE("zero partials are judged against the gradient's scale", "[gradcheck]") {
    // f(x) = x ⊙ x ⊙ x has gradient 3 x^2 ⊙ G: exactly 0 where x is 0, while the central
    // difference there is (eps^3 + eps^3) / (2 eps) * G = eps^2 G, its truncation error. Against
    // itself that would be a 100% error; the floor judges it against the gradient's scale.
    std::mt19937_64 rng(42);
    Inputs x = random_inputs(rng, {Shape{4, 5}});
    for (Index j = 0; j < 5; ++j) x[0](2, j) = 0.0;
    const auto f = [](const Inputs& in) { return in[0] * in[0] * in[0]; };
    const auto df = [](const Inputs& in, const Tensor<double>& dY) {
        return Inputs{dY * in[0] * in[0] * 3.0};
    };
    const GradcheckResult r = headwise::gradcheck(f, df, x, rng);
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 20);

    // Claiming a nonzero gradient where the true one is 0 still fails.
    const auto wrong = [](const Inputs& in, const Tensor<double>& dY) {
        Inputs g{dY * in[0] * in[0] * 3.0};
        g[0](2, 3) = 0.5;
        return g;
    };
    const GradcheckResult w = headwise::gradcheck(f, wrong, x, rng);
    CHECK_FALSE(w.ok);
    CHECK_THAT(w.where, StartsWith("input 0 [2, 3]: analytic 0.5, numeric "));
}

TEST_CASE("gradcheck skips empty gradients and checks only the inputs asked for", "[gradcheck]") {
    std::mt19937_64 rng(42);
    const Inputs ab = random_inputs(rng, {Shape{3, 4}, Shape{4, 2}});

    // An empty tensor means "not differentiated": input 0 is skipped.
    const auto only_b = [](const Inputs& x, const Tensor<double>& dC) {
        return Inputs{Tensor<double>(), headwise::matmul(x[0], dC, true, false)};
    };
    const GradcheckResult r = headwise::gradcheck(matmul_forward, only_b, ab, rng);
    CHECK(r.ok);
    CHECK(r.checked == 8);

    // With an index list, a wrong dA is not looked at when only input 1 is checked...
    const auto wrong_a = [](const Inputs& x, const Tensor<double>& dC) {
        Inputs g = matmul_backward(x, dC);
        g[0] *= -1.0;
        return g;
    };
    const GradcheckResult only1 = headwise::gradcheck(matmul_forward, wrong_a, ab, {1}, rng);
    CHECK(only1.ok);
    CHECK(only1.checked == 8);
    // ...and is caught when input 0 is.
    const GradcheckResult only0 = headwise::gradcheck(matmul_forward, wrong_a, ab, {0}, rng);
    CHECK_FALSE(only0.ok);
    CHECK(only0.checked == 12);
    CHECK_THAT(only0.max_rel_error, WithinAbs(2.0, 1e-6));  // |-g - g| / max(|g|, |g|)
}

TEST_CASE("gradcheck fails when it compared nothing", "[gradcheck]") {
    std::mt19937_64 rng(42);
    const Inputs ab = random_inputs(rng, {Shape{3, 4}, Shape{4, 2}});
    const std::string nothing =
        "nothing checked: every input asked for has an empty gradient or no element";

    // A backward that returns only empty tensors differentiates nothing: no evidence, no pass.
    const auto none = [](const Inputs&, const Tensor<double>&) {
        return Inputs{Tensor<double>(), Tensor<double>()};
    };
    const GradcheckResult r = headwise::gradcheck(matmul_forward, none, ab, rng);
    CHECK_FALSE(r.ok);
    CHECK(r.checked == 0);
    CHECK(r.where == nothing);

    // Likewise an empty list of inputs to check, and inputs without elements.
    const GradcheckResult empty_list =
        headwise::gradcheck(matmul_forward, matmul_backward, ab, std::vector<Index>{}, rng);
    CHECK_FALSE(empty_list.ok);
    CHECK(empty_list.checked == 0);
    const Inputs no_elements = random_inputs(rng, {Shape{0, 4}, Shape{4, 0}});
    const GradcheckResult e =
        headwise::gradcheck(matmul_forward, matmul_backward, no_elements, rng);
    CHECK_FALSE(e.ok);
    CHECK(e.where == nothing);

    // One input checked is enough to pass.
    const auto only_a = [](const Inputs& x, const Tensor<double>& dC) {
        return Inputs{headwise::matmul(dC, x[1], false, true), Tensor<double>()};
    };
    const GradcheckResult a = headwise::gradcheck(matmul_forward, only_a, ab, rng);
    CHECK(a.ok);
    CHECK(a.checked == 12);
}

TEST_CASE("gradcheck is deterministic per seed and leaves the inputs alone", "[gradcheck]") {
    std::mt19937_64 rng(42);
    const Inputs ab = random_inputs(rng, {Shape{2, 3}, Shape{3, 2}});
    const Inputs copy = ab;
    std::mt19937_64 r1(7), r2(7), r3(8);
    const GradcheckResult a = headwise::gradcheck(matmul_forward, matmul_backward, ab, r1);
    const GradcheckResult b = headwise::gradcheck(matmul_forward, matmul_backward, ab, r2);
    const GradcheckResult c = headwise::gradcheck(matmul_forward, matmul_backward, ab, r3);
    CHECK(a.max_rel_error == b.max_rel_error);
    CHECK(a.where == b.where);
    CHECK(a.where != c.where);  // another upstream gradient G
    CHECK(r1() == r2());
    for (std::size_t i = 0; i < ab.size(); ++i)
        for (Index j = 0; j < ab[i].numel(); ++j) REQUIRE(ab[i].data()[j] == copy[i].data()[j]);

    // The options reach the comparison: an impossibly strict tolerance fails.
    GradcheckOptions strict;
    strict.tolerance = 1e-300;
    std::mt19937_64 r4(7);
    CHECK_FALSE(headwise::gradcheck(matmul_forward, matmul_backward, ab, r4, strict).ok);
}

TEST_CASE("gradcheck argument errors", "[gradcheck]") {
    std::mt19937_64 rng(42);
    const Inputs ab = random_inputs(rng, {Shape{2, 3}, Shape{3, 2}});

    const auto one_only = [](const Inputs& x, const Tensor<double>& dC) {
        return Inputs{headwise::matmul(dC, x[1], false, true)};
    };
    REQUIRE_THROWS_AS(headwise::gradcheck(matmul_forward, one_only, ab, rng),
                      std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::gradcheck(matmul_forward, one_only, ab, rng),
                        "headwise::gradcheck: backward: must return one tensor per input (2), got "
                        "1 tensors");

    REQUIRE_THROWS_WITH(headwise::gradcheck(matmul_forward, matmul_backward, ab, {0, 2}, rng),
                        "headwise::gradcheck: check_inputs: must hold input indices in [0, 2), "
                        "got 2");

    GradcheckOptions bad;
    bad.eps = 0.0;
    REQUIRE_THROWS_WITH(headwise::gradcheck(matmul_forward, matmul_backward, ab, rng, bad),
                        "headwise::gradcheck: options.eps: must be positive, got 0.000000");
    bad.eps = 1e-6;
    bad.tolerance = -1.0;
    REQUIRE_THROWS_WITH(headwise::gradcheck(matmul_forward, matmul_backward, ab, rng, bad),
                        "headwise::gradcheck: options.tolerance: must be positive, got -1.000000");

    // f whose output shape depends on the input values cannot be checked against one G.
    const auto unstable = [](const Inputs& x) {
        return x[0](0, 0) > 10.0 ? Tensor<double>(Shape{1}) : Tensor<double>(Shape{2});
    };
    const auto zero = [](const Inputs& x, const Tensor<double>&) {
        return Inputs{Tensor<double>(x[0].shape())};
    };
    Inputs big{Tensor<double>(Shape{1, 1}, {10.0 - 1e-7})};  // x + eps crosses 10
    REQUIRE_THROWS_AS(headwise::gradcheck(unstable, zero, big, rng), headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::gradcheck(unstable, zero, big, rng),
                        "headwise::gradcheck: f(perturbed inputs): expected shape [2], got [1]");
}

}  // namespace test_gradcheck
