// SPDX-License-Identifier: MIT
// Dropout as a function of a seed: inverted scaling, keep rate, regeneration, independent streams.
#include <headwise/ops/dropout.hpp>
#include <headwise/tensor.hpp>

#include "support/catch.hpp"

namespace test_ops_dropout {

using namespace headwise;

TEST_CASE("dropout keeps about 1 - p of the entries, scaled by 1 / (1 - p)", "[ops][dropout]") {
    const double p = GENERATE(0.1, 0.5, 0.9);
    CAPTURE(p);
    const Tensor<double> x = Tensor<double>::full(Shape{200, 100}, 2.0);
    Tensor<double> y(x.shape());
    ops::dropout_apply(ops::Dropout{p, 77}, 0, x.matrix(), y.matrix());
    Index kept = 0;
    for (double v : y) {
        if (v != 0.0) {
            ++kept;
            CHECK_THAT(v, WithinRel(2.0 / (1.0 - p), 1e-15));
        }
    }
    const double rate = static_cast<double>(kept) / static_cast<double>(y.numel());
    CHECK_THAT(rate, WithinAbs(1.0 - p, 0.015));  // 20000 draws: std of the rate <= 0.0036
}

TEST_CASE("the same seed and stream regenerate the same mask, and others differ",
          "[ops][dropout]") {
    const Tensor<float> x = Tensor<float>::ones(Shape{16, 16});
    Tensor<float> a(x.shape()), b(x.shape()), c(x.shape()), d(x.shape());
    ops::dropout_apply(ops::Dropout{0.5, 5}, 3, x.matrix(), a.matrix());
    ops::dropout_apply(ops::Dropout{0.5, 5}, 3, x.matrix(), b.matrix());
    ops::dropout_apply(ops::Dropout{0.5, 5}, 4, x.matrix(), c.matrix());
    ops::dropout_apply(ops::Dropout{0.5, 6}, 3, x.matrix(), d.matrix());
    Index diff_stream = 0, diff_seed = 0;
    for (Index i = 0; i < x.numel(); ++i) {
        CHECK(a.data()[i] == b.data()[i]);
        diff_stream += a.data()[i] != c.data()[i];
        diff_seed += a.data()[i] != d.data()[i];
    }
    CHECK(diff_stream > 64);  // about half of 256 differ
    CHECK(diff_seed > 64);
}

TEST_CASE("dropout in place equals dropout into another buffer", "[ops][dropout]") {
    std::mt19937_64 rng(1);
    Tensor<double> x = Tensor<double>::randn(Shape{8, 9}, rng);
    Tensor<double> y(x.shape());
    ops::dropout_apply(ops::Dropout{0.3, 9}, 1, x.matrix(), y.matrix());
    ops::dropout_apply(ops::Dropout{0.3, 9}, 1, x.matrix(), x.matrix());
    for (Index i = 0; i < x.numel(); ++i) CHECK(x.data()[i] == y.data()[i]);
    CHECK_FALSE(ops::Dropout{}.active());
}

}  // namespace test_ops_dropout
