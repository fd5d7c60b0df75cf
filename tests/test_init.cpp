// SPDX-License-Identifier: MIT
// Tests of headwise/init.hpp: PyTorch's bounds, the uniform distribution, determinism per seed.
#include <headwise/init.hpp>

#include <cmath>      // std::sqrt
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <tuple>      // std::tuple

#include "support/catch.hpp"
#include "support/distribution.hpp"
#include "support/instantiations.hpp"

namespace test_init {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::test::uniform_mismatch;

TEST_CASE("fan_in_and_fan_out follows torch.nn.init", "[init]") {
    // [out, in]: fan_in = in, fan_out = out.
    const headwise::Fans linear = headwise::fan_in_and_fan_out(Shape{1536, 512});
    CHECK(linear.in == 512);
    CHECK(linear.out == 1536);
    // [out, in, kh, kw]: both multiplied by the receptive field kh * kw.
    const headwise::Fans conv = headwise::fan_in_and_fan_out(Shape{8, 4, 3, 5});
    CHECK(conv.in == 4 * 15);
    CHECK(conv.out == 8 * 15);

    CHECK_THROWS_MATCHES(headwise::fan_in_and_fan_out(Shape{7}), headwise::shape_error,
                         Message("headwise::fan_in_and_fan_out: tensor: expected shape [out, in, "
                                 "...] (rank >= 2), got [7]"));
}

TEST_CASE("the uniform checker rejects a bound 10% off", "[init]") {
    // The tests below are only as good as uniform_mismatch: it must fail for a wrong bound.
    std::mt19937_64 rng(42);
    const double bound = 0.05;
    Tensor<double> w(Shape{200, 100});
    headwise::uniform_(w, -bound, bound, rng);
    CHECK(uniform_mismatch<double>(w, bound) == "");
    CHECK(uniform_mismatch<double>(w, 1.1 * bound) != "");  // too narrow for the claimed bound
    CHECK(uniform_mismatch<double>(w, 0.9 * bound) != "");  // values outside the claimed bound

    Tensor<double> shifted(Shape{200, 100});
    headwise::uniform_(shifted, -0.9 * bound, 1.1 * bound, rng);
    CHECK(uniform_mismatch<double>(shifted, 1.1 * bound) != "");  // one end short
}

TEMPLATE_TEST_CASE("uniform_ draws lo + (hi - lo) * uniform01, one draw per element", "[init]",
                   float, double) {
    std::mt19937_64 rng(42), replay(42);
    Tensor<TestType> w(Shape{3, 7});
    headwise::uniform_(w, -2.0, 3.0, rng);
    for (Index i = 0; i < w.numel(); ++i) {
        CAPTURE(i);
        CHECK(w.data()[i] == static_cast<TestType>(headwise::uniform_scalar(replay, -2.0, 3.0)));
    }
    CHECK(rng() == replay());  // exactly numel() draws consumed

    // Views of user memory work the same.
    std::vector<TestType> user(21);
    std::mt19937_64 again(42);
    headwise::uniform_(headwise::view(user.data(), Shape{21}), -2.0, 3.0, again);
    for (Index i = 0; i < 21; ++i) CHECK(user[static_cast<std::size_t>(i)] == w.data()[i]);
}

TEMPLATE_TEST_CASE("uniform_ rejects lo > hi before drawing", "[init]", float, double) {
    std::mt19937_64 rng(42), untouched(42);
    Tensor<TestType> w(Shape{4});
    CHECK_THROWS_MATCHES(headwise::uniform_(w, 1.0, 0.5, rng), std::invalid_argument,
                         Message("headwise::uniform_: hi: must be >= lo = 1, got 0.5"));
    CHECK(rng() == untouched());
    for (TestType v : w) CHECK(v == TestType(0));
}

TEMPLATE_TEST_CASE("kaiming_uniform_ draws U(-bound, bound), bound = gain sqrt(3 / fan_in)",
                   "[init]", float, double) {
    const auto [out, in, a, bound] = GENERATE(table<Index, Index, double, double>({
        // PyTorch's nn.Linear: a = sqrt(5), gain = sqrt(1/3), bound = 1 / sqrt(in)
        {256, 400, std::sqrt(5.0), 1.0 / 20.0},
        {1536, 64, std::sqrt(5.0), 1.0 / 8.0},
        // a = 0 (ReLU): gain = sqrt(2), bound = sqrt(6 / in)
        {100, 150, 0.0, std::sqrt(6.0 / 150.0)},
        // a = 1: gain = 1, bound = sqrt(3 / in)
        {64, 1600, 1.0, std::sqrt(3.0 / 1600.0)},
    }));
    CAPTURE(out, in, a, bound);
    std::mt19937_64 rng(42);
    Tensor<TestType> w(Shape{out, in});
    headwise::kaiming_uniform_(w, a, rng);
    const std::string why = uniform_mismatch<TestType>(w, bound);
    INFO(why);
    CHECK(why.empty());
}

TEMPLATE_TEST_CASE("xavier_uniform_ draws U(-bound, bound), bound = gain sqrt(6 / (in + out))",
                   "[init]", float, double) {
    const auto [out, in, gain] = GENERATE(table<Index, Index, double>({
        {3 * 192, 192, 1.0},  // nn.MultiheadAttention's packed in_proj_weight [3E, E]
        {192, 192, 1.0},      // one of q/k/v_proj_weight when separate
        {100, 300, 2.0},
    }));
    const double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
    CAPTURE(out, in, gain, bound);
    std::mt19937_64 rng(42);
    Tensor<TestType> w(Shape{out, in});
    headwise::xavier_uniform_(w, rng, gain);
    const std::string why = uniform_mismatch<TestType>(w, bound);
    INFO(why);
    CHECK(why.empty());
}

TEMPLATE_TEST_CASE("initialisers are deterministic per seed", "[init]", float, double) {
    const Shape shape{32, 48};
    Tensor<TestType> a(shape), b(shape), c(shape);
    std::mt19937_64 rng_a(42), rng_b(42), rng_c(43);
    headwise::kaiming_uniform_(a, std::sqrt(5.0), rng_a);
    headwise::kaiming_uniform_(b, std::sqrt(5.0), rng_b);
    headwise::kaiming_uniform_(c, std::sqrt(5.0), rng_c);
    Index same_ab = 0, same_ac = 0;
    for (Index i = 0; i < a.numel(); ++i) {
        same_ab += a.data()[i] == b.data()[i];
        same_ac += a.data()[i] == c.data()[i];
    }
    CHECK(same_ab == a.numel());
    CHECK(same_ac < 4);  // another seed, another tensor

    // The next draws continue the same stream.
    headwise::xavier_uniform_(a, rng_a);
    headwise::xavier_uniform_(b, rng_b);
    for (Index i = 0; i < a.numel(); ++i) CHECK(a.data()[i] == b.data()[i]);
}

TEMPLATE_TEST_CASE("kaiming_uniform_ and xavier_uniform_ need rank >= 2", "[init]", float, double) {
    std::mt19937_64 rng(42);
    Tensor<TestType> v(Shape{5});
    CHECK_THROWS_MATCHES(headwise::kaiming_uniform_(v, 0.0, rng), headwise::shape_error,
                         Message("headwise::kaiming_uniform_: tensor: expected shape [out, in, "
                                 "...] (rank >= 2), got [5]"));
    CHECK_THROWS_MATCHES(headwise::xavier_uniform_(v, rng), headwise::shape_error,
                         Message("headwise::xavier_uniform_: tensor: expected shape [out, in, "
                                 "...] (rank >= 2), got [5]"));
    // Empty weights are left alone (fan_in may be 0) and draw nothing.
    std::mt19937_64 untouched(42);
    Tensor<TestType> empty(Shape{4, 0});
    headwise::kaiming_uniform_(empty, 0.0, rng);
    headwise::xavier_uniform_(empty, rng);
    CHECK(rng() == untouched());
}

TEMPLATE_TEST_CASE("constant_ and zeros_ fill every element", "[init]", float, double) {
    Tensor<TestType> w = Tensor<TestType>::full(Shape{3, 5}, TestType(7));
    headwise::constant_(w, 0.25);
    for (TestType v : w) CHECK(v == TestType(0.25));
    headwise::zeros_(w.view());
    for (TestType v : w) CHECK(v == TestType(0));
}

}  // namespace test_init
