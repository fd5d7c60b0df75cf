// SPDX-License-Identifier: MIT
// Tests of headwise/ops/linear.hpp against plain double loops, on whole and strided matrices.
#include <headwise/ops/linear.hpp>

#include <headwise/compare.hpp>
#include <headwise/gradcheck.hpp>

#include <random>  // std::mt19937_64
#include <vector>  // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_ops_linear {

using headwise::ConstMatrixRef;
using headwise::Index;
using headwise::MatrixRef;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
namespace ops = headwise::ops;
namespace reference = headwise::test::reference;
using headwise::test::dot_tolerance;

namespace {

/// A contiguous copy of a [rows, cols] matrix or matrix block.
template <class T, class Block>
Tensor<T> copy_block(const Block& M) {
    Tensor<T> t(Shape{M.rows(), M.cols()});
    t.matrix() = M;
    return t;
}

/// True when every element of `t` outside columns [first, first + count) still equals `fill`.
template <class T>
bool outside_block_is(const Tensor<T>& t, Index first, Index count, T fill) {
    const Index cols = t.shape().back();
    for (Index i = 0; i < t.numel(); ++i) {
        const Index c = i % cols;
        if ((c < first || c >= first + count) && t.data()[i] != fill) return false;
    }
    return true;
}

}  // namespace

TEMPLATE_TEST_CASE("ConstMatrixRef and MatrixRef bind to tensors and column blocks without a copy",
                   "[ops][linear]", float, double) {
    Tensor<TestType> x(Shape{4, 6});
    const Tensor<TestType>& cx = x;
    CHECK(ConstMatrixRef<TestType>(cx.matrix()).data() == x.data());
    CHECK(ConstMatrixRef<TestType>(cx.column_block(2, 3)).data() == x.data() + 2);
    CHECK(ConstMatrixRef<TestType>(cx.column_block(2, 3)).outerStride() == 6);
    CHECK(MatrixRef<TestType>(x.matrix()).data() == x.data());
    CHECK(MatrixRef<TestType>(x.column_block(1, 4)).data() == x.data() + 1);
}

TEMPLATE_TEST_CASE("linear_forward matches the reference", "[ops][linear]", float, double) {
    using T = TestType;
    const auto [N, in, out] = GENERATE(table<Index, Index, Index>(
        {{1, 1, 1}, {3, 5, 4}, {7, 16, 9}, {64, 33, 17}, {5, 128, 96}, {0, 4, 3}}));
    const bool bias = GENERATE(true, false);
    CAPTURE(N, in, out, bias);
    std::mt19937_64 rng(42);
    const Tensor<T> X = Tensor<T>::randn(Shape{N, in}, rng);    // [N, in]
    const Tensor<T> W = Tensor<T>::randn(Shape{out, in}, rng);  // [out, in]
    const Tensor<T> b = Tensor<T>::randn(Shape{out}, rng);      // [out]
    Tensor<T> Y = Tensor<T>::full(Shape{N, out}, T(123));       // [N, out], overwritten

    ops::linear_forward<T>(X.matrix(), W.matrix(), bias ? b.data() : nullptr, Y.matrix());

    const Tensor<double> expected =
        reference::linear(reference::to_double<T>(X), reference::to_double<T>(W),
                          bias ? reference::to_double<T>(b) : Tensor<double>());
    HEADWISE_CHECK_CLOSE(Y, expected, dot_tolerance<T>(in));
}

TEMPLATE_TEST_CASE("linear_forward reads and writes strided column blocks in place",
                   "[ops][linear]", float, double) {
    using T = TestType;
    // The layout of attention heads: X, W and Y are column blocks of wider row-major matrices.
    const Index N = 6, in = 5, out = 4;
    std::mt19937_64 rng(42);
    const Tensor<T> X_wide = Tensor<T>::randn(Shape{N, in + 3}, rng);    // [N, in + 3]
    const Tensor<T> W_wide = Tensor<T>::randn(Shape{out, in + 2}, rng);  // [out, in + 2]
    const Tensor<T> b = Tensor<T>::randn(Shape{out}, rng);               // [out]
    const T fill = T(-7);
    Tensor<T> Y_wide = Tensor<T>::full(Shape{N, out + 5}, fill);  // [N, out + 5]

    ops::linear_forward<T>(X_wide.column_block(2, in), W_wide.column_block(1, in), b.data(),
                           Y_wide.column_block(3, out));

    const Tensor<double> expected =
        reference::linear(reference::to_double<T>(copy_block<T>(X_wide.column_block(2, in))),
                          reference::to_double<T>(copy_block<T>(W_wide.column_block(1, in))),
                          reference::to_double<T>(b));
    HEADWISE_CHECK_CLOSE(copy_block<T>(Y_wide.column_block(3, out)), expected,
                         dot_tolerance<T>(in));
    CHECK(outside_block_is(Y_wide, 3, out, fill));
}

TEMPLATE_TEST_CASE("linear_backward accumulates dX, dW and db onto what is there", "[ops][linear]",
                   float, double) {
    using T = TestType;
    const auto [N, in, out] = GENERATE(
        table<Index, Index, Index>({{1, 1, 1}, {3, 5, 4}, {7, 16, 9}, {64, 33, 17}, {0, 4, 3}}));
    CAPTURE(N, in, out);
    std::mt19937_64 rng(42);
    const Tensor<T> X = Tensor<T>::randn(Shape{N, in}, rng);    // [N, in]
    const Tensor<T> W = Tensor<T>::randn(Shape{out, in}, rng);  // [out, in]
    const Tensor<T> dY = Tensor<T>::randn(Shape{N, out}, rng);  // [N, out]
    // Non-zero starting gradients: the kernels must add, not overwrite.
    const Tensor<T> dX0 = Tensor<T>::randn(Shape{N, in}, rng);    // [N, in]
    const Tensor<T> dW0 = Tensor<T>::randn(Shape{out, in}, rng);  // [out, in]
    const Tensor<T> db0 = Tensor<T>::randn(Shape{out}, rng);      // [out]
    Tensor<T> dX = dX0, dW = dW0, db = db0;

    ops::linear_backward<T>(X.matrix(), W.matrix(), dY.matrix(), dX.matrix(), dW.matrix(),
                            db.data());

    // Reference in double: dX = dX0 + dY W, dW = dW0 + dY^T X, db = db0 + sum_n dY.
    Tensor<double> dX_ref = reference::to_double<T>(dX0), dW_ref = reference::to_double<T>(dW0),
                   db_ref = reference::to_double<T>(db0);
    for (Index n = 0; n < N; ++n)
        for (Index o = 0; o < out; ++o) {
            const double g = static_cast<double>(dY(n, o));
            db_ref(o) += g;
            for (Index i = 0; i < in; ++i) {
                dX_ref(n, i) += g * static_cast<double>(W(o, i));
                dW_ref(o, i) += g * static_cast<double>(X(n, i));
            }
        }
    HEADWISE_CHECK_CLOSE(dX, dX_ref, dot_tolerance<T>(out));
    HEADWISE_CHECK_CLOSE(dW, dW_ref, dot_tolerance<T>(N));
    HEADWISE_CHECK_CLOSE(db, db_ref, dot_tolerance<T>(N));

    // The split kernels compute the same pieces one at a time, and only their own.
    Tensor<T> dX2 = dX0, dW2 = dW0, db2 = db0;
    ops::linear_backward_input<T>(dY.matrix(), W.matrix(), dX2.matrix());
    CHECK(headwise::max_abs_diff(dX2, dX).max_abs == 0.0);
    CHECK(headwise::max_abs_diff(dW2, dW0).max_abs == 0.0);
    ops::linear_backward_weight<T>(dY.matrix(), X.matrix(), dW2.matrix());
    CHECK(headwise::max_abs_diff(dW2, dW).max_abs == 0.0);
    CHECK(headwise::max_abs_diff(db2, db0).max_abs == 0.0);
    ops::linear_backward_bias<T>(dY.matrix(), db2.data());
    CHECK(headwise::max_abs_diff(db2, db).max_abs == 0.0);

    // Without bias, db is skipped.
    Tensor<T> dX3 = dX0, dW3 = dW0;
    ops::linear_backward<T>(X.matrix(), W.matrix(), dY.matrix(), dX3.matrix(), dW3.matrix(),
                            nullptr);
    CHECK(headwise::max_abs_diff(dX3, dX).max_abs == 0.0);
    CHECK(headwise::max_abs_diff(dW3, dW).max_abs == 0.0);
}

TEMPLATE_TEST_CASE("linear_backward on strided column blocks touches only the blocks",
                   "[ops][linear]", float, double) {
    using T = TestType;
    const Index N = 5, in = 4, out = 3;
    std::mt19937_64 rng(42);
    const Tensor<T> X_wide = Tensor<T>::randn(Shape{N, in + 4}, rng);    // [N, in + 4]
    const Tensor<T> W_wide = Tensor<T>::randn(Shape{out, in + 1}, rng);  // [out, in + 1]
    const Tensor<T> dY_wide = Tensor<T>::randn(Shape{N, out + 2}, rng);  // [N, out + 2]
    const T fill = T(0.5);
    Tensor<T> dX_wide = Tensor<T>::full(Shape{N, in + 3}, fill);    // [N, in + 3]
    Tensor<T> dW_wide = Tensor<T>::full(Shape{out, in + 2}, fill);  // [out, in + 2]
    Tensor<T> db(Shape{out});                                       // [out]

    ops::linear_backward<T>(X_wide.column_block(1, in), W_wide.column_block(0, in),
                            dY_wide.column_block(2, out), dX_wide.column_block(3, in),
                            dW_wide.column_block(2, in), db.data());

    // Compare with the kernel on contiguous copies (tested against the reference above).
    const Tensor<T> X = copy_block<T>(X_wide.column_block(1, in));
    const Tensor<T> W = copy_block<T>(W_wide.column_block(0, in));
    const Tensor<T> dY = copy_block<T>(dY_wide.column_block(2, out));
    Tensor<T> dX = Tensor<T>::full(Shape{N, in}, fill), dW = Tensor<T>::full(Shape{out, in}, fill),
              db_contiguous(Shape{out});
    ops::linear_backward<T>(X.matrix(), W.matrix(), dY.matrix(), dX.matrix(), dW.matrix(),
                            db_contiguous.data());
    // Equal up to rounding: alignment may change the order of the SIMD sums.
    CHECK(headwise::max_abs_diff(copy_block<T>(dX_wide.column_block(3, in)), dX).max_abs <=
          dot_tolerance<T>(out));
    CHECK(headwise::max_abs_diff(copy_block<T>(dW_wide.column_block(2, in)), dW).max_abs <=
          dot_tolerance<T>(N));
    CHECK(headwise::max_abs_diff(db, db_contiguous).max_abs <= dot_tolerance<T>(N));
    CHECK(outside_block_is(dX_wide, 3, in, fill));
    CHECK(outside_block_is(dW_wide, 2, in, fill));
    // And the gradient is not trivially the fill: dX = fill + dY W.
    CHECK(headwise::max_abs_diff(dX, Tensor<T>::full(Shape{N, in}, fill)).max_abs > 0.1);
}

TEST_CASE("linear kernels pass a central-difference gradient check over X, W and b",
          "[ops][linear][gradcheck]") {
    const auto [N, in, out] =
        GENERATE(table<Index, Index, Index>({{1, 1, 1}, {3, 5, 4}, {6, 7, 2}}));
    CAPTURE(N, in, out);
    std::mt19937_64 rng(42);
    const std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{N, in}, rng),
                                             Tensor<double>::randn(Shape{out, in}, rng),
                                             Tensor<double>::randn(Shape{out}, rng)};
    const auto forward = [](const std::vector<Tensor<double>>& x) {
        const Tensor<double>& X = x[0];                 // [N, in]
        const Tensor<double>& W = x[1];                 // [out, in]
        Tensor<double> Y(Shape{X.size(0), W.size(0)});  // [N, out]
        ops::linear_forward<double>(X.matrix(), W.matrix(), x[2].data(), Y.matrix());
        return Y;
    };
    const auto backward = [](const std::vector<Tensor<double>>& x, const Tensor<double>& dY) {
        std::vector<Tensor<double>> grads{Tensor<double>(x[0].shape()),
                                          Tensor<double>(x[1].shape()),
                                          Tensor<double>(x[2].shape())};
        ops::linear_backward<double>(x[0].matrix(), x[1].matrix(), dY.matrix(), grads[0].matrix(),
                                     grads[1].matrix(), grads[2].data());
        return grads;
    };
    const headwise::GradcheckResult result = headwise::gradcheck(forward, backward, inputs, rng);
    INFO("max relative error " << result.max_rel_error << " at " << result.where);
    CHECK(result.ok);
    CHECK(result.max_rel_error <= 1e-6);
    CHECK(result.checked == N * in + out * in + out);
}

TEMPLATE_TEST_CASE("linear kernels reject mismatched shapes before writing", "[ops][linear]", float,
                   double) {
    using T = TestType;
    const Tensor<T> X(Shape{2, 5}), W(Shape{4, 5}), W_bad(Shape{4, 6}), dY(Shape{2, 4}),
        dY_bad(Shape{2, 3});
    Tensor<T> Y(Shape{2, 4}), Y_bad(Shape{4, 2});
    CHECK_THROWS_MATCHES(
        ops::linear_forward<T>(X.matrix(), W_bad.matrix(), nullptr, Y.matrix()),
        headwise::shape_error,
        Message("headwise::ops::linear_forward: W: expected shape [4, 5], got [4, 6]"));
    CHECK_THROWS_MATCHES(
        ops::linear_forward<T>(X.matrix(), W.matrix(), nullptr, Y_bad.matrix()),
        headwise::shape_error,
        Message("headwise::ops::linear_forward: Y: expected shape [2, 4], got [4, 2]"));

    // A bad dW must be reported before dX is touched.
    Tensor<T> dX = Tensor<T>::full(Shape{2, 5}, T(1)), dW(Shape{4, 5}), dW_bad(Shape{5, 4});
    CHECK_THROWS_MATCHES(ops::linear_backward<T>(X.matrix(), W.matrix(), dY.matrix(), dX.matrix(),
                                                 dW_bad.matrix(), nullptr),
                         headwise::shape_error,
                         Message("headwise::ops::linear_backward: dW: expected shape [4, 5], got "
                                 "[5, 4]"));
    for (T v : dX) CHECK(v == T(1));
    CHECK_THROWS_MATCHES(ops::linear_backward<T>(X.matrix(), W.matrix(), dY_bad.matrix(),
                                                 dX.matrix(), dW.matrix(), nullptr),
                         headwise::shape_error,
                         Message("headwise::ops::linear_backward: dY: expected shape [2, 4], got "
                                 "[2, 3]"));
    CHECK_THROWS_MATCHES(
        ops::linear_backward_input<T>(dY_bad.matrix(), W.matrix(), dX.matrix()),
        headwise::shape_error,
        Message("headwise::ops::linear_backward_input: dY: expected shape [2, 4], got [2, 3]"));
    CHECK_THROWS_MATCHES(
        ops::linear_backward_weight<T>(dY.matrix(), X.matrix(), dW_bad.matrix()),
        headwise::shape_error,
        Message("headwise::ops::linear_backward_weight: dW: expected shape [4, 5], got [5, 4]"));
}

}  // namespace test_ops_linear
