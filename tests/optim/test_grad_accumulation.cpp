// SPDX-License-Identifier: MIT
// Tests of gradient accumulation: k micro-batches with the loss scaled by their share give the full
// batch's gradient and optimiser step; scale_grad and its error.
#include <headwise/layers/linear.hpp>
#include <headwise/losses/mse.hpp>
#include <headwise/optim/adam.hpp>
#include <headwise/optim/grad_accumulation.hpp>
#include <headwise/optim/sgd.hpp>
#include <headwise/random.hpp>
#include <headwise/tensor.hpp>
#include <headwise/tensor_ops/elementwise.hpp>

#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"

namespace test_grad_accumulation {

using namespace headwise;
using headwise::test::Tol;

namespace {

constexpr Index N = 12, kIn = 5, kOut = 3;  // rows of the full batch, Linear(5, 3)

/// A regression problem and two copies of one Linear: `full` sees the whole batch at once,
/// `micro` the same rows in micro-batches.
template <class T>
struct Problem {
    Generator rng{7};
    Tensor<T> x = Tensor<T>::randn(Shape{N, kIn}, rng);        // [N, in]
    Tensor<T> target = Tensor<T>::randn(Shape{N, kOut}, rng);  // [N, out]
    Linear<T> full{kIn, kOut, /*bias=*/true, rng};
    Linear<T> micro{kIn, kOut, /*bias=*/true, rng};
    Problem() { micro.load_state_dict(full.state_dict()); }

    /// Forward and backward of the full batch; returns the loss.
    double full_backward() {
        const Tensor<T> y = full.forward(x);  // [N, out]
        const LossResult<T> loss = mse_loss<T>(y, target);
        full.backward(x, loss.grad);
        return loss.value;
    }

    /// Forward and backward of rows [begin, end) with the loss gradient multiplied by `scale`
    /// (1 for no scaling); returns the micro-batch's loss times `scale`.
    double micro_backward(Index begin, Index end, T scale) {
        const Index m = end - begin;
        const TensorView<const T> x_i = view(x.data() + begin * kIn, Shape{m, kIn});  // [m, in]
        const TensorView<const T> t_i =
            view(target.data() + begin * kOut, Shape{m, kOut});  // [m, out]
        const Tensor<T> y_i = micro.forward(x_i);                // [m, out]
        LossResult<T> loss = mse_loss<T>(y_i, t_i);
        loss.grad *= scale;
        micro.backward(x_i, loss.grad);
        return loss.value * static_cast<double>(scale);
    }

    void check_same_gradients() {
        const StateDict<T> want = full.grad_dict(), got = micro.grad_dict();
        for (const auto& entry : want) {
            CAPTURE(entry.first);
            HEADWISE_CHECK_CLOSE(got.at(entry.first), entry.second, Tol<T>::rel);
        }
    }
    void check_same_parameters() {
        const StateDict<T> want = full.state_dict(), got = micro.state_dict();
        for (const auto& entry : want) {
            CAPTURE(entry.first);
            HEADWISE_CHECK_CLOSE(got.at(entry.first), entry.second, Tol<T>::rel);
        }
    }
};

}  // namespace

TEMPLATE_TEST_CASE("k micro-batches, each loss scaled by 1/k, give the full batch's step",
                   "[optim][accumulation]", float, double) {
    using T = TestType;
    const Index k = GENERATE(1, 2, 3, 4, 6);
    const bool adam = GENERATE(false, true);
    CAPTURE(k, adam);
    const Index m = N / k;
    Problem<T> pr;
    SGDOptions so;
    so.lr = 0.1;
    so.momentum = 0.9;
    AdamOptions ao;
    ao.lr = 0.01;
    SGD<T> sgd_full(pr.full.parameters(), so), sgd_micro(pr.micro.parameters(), so);
    AdamW<T> adam_full(pr.full.parameters(), ao), adam_micro(pr.micro.parameters(), ao);
    for (int step = 1; step <= 3; ++step) {
        CAPTURE(step);
        pr.full.zero_grad();
        pr.micro.zero_grad();
        const double loss = pr.full_backward();
        double summed = 0.0;
        for (Index i = 0; i < k; ++i)
            summed += pr.micro_backward(i * m, (i + 1) * m, T(1) / static_cast<T>(k));
        CHECK_THAT(summed, WithinRel(loss, Tol<T>::rel));
        pr.check_same_gradients();
        if (adam) {
            adam_full.step();
            adam_micro.step();
        } else {
            sgd_full.step();
            sgd_micro.step();
        }
        pr.check_same_parameters();
    }
}

TEMPLATE_TEST_CASE("unscaled accumulation then scale_grad, and micro-batches of unequal sizes",
                   "[optim][accumulation]", float, double) {
    using T = TestType;
    Problem<T> pr;
    pr.full_backward();

    // Three equal micro-batches backwarded unscaled: the sum of their means; 1/3 of it is the
    // full batch's mean.
    for (Index i = 0; i < 3; ++i) pr.micro_backward(i * 4, (i + 1) * 4, T(1));
    scale_grad(pr.micro.parameters(), 1.0 / 3.0);
    pr.check_same_gradients();

    // 5 rows and 7 rows: each mean weighted by its share of the 12.
    pr.micro.zero_grad();
    pr.micro_backward(0, 5, static_cast<T>(5.0 / 12.0));
    pr.micro_backward(5, 12, static_cast<T>(7.0 / 12.0));
    pr.check_same_gradients();
}

TEST_CASE("scale_grad multiplies every gradient and rejects a factor that is not finite",
          "[optim][accumulation][errors]") {
    Tensor<double> v(Shape{2}), g(Shape{2}, {1.5, -4.0}), w(Shape{1}), h(Shape{1}, {3.0});
    const std::vector<Parameter<double>> ps{{"a", v, g}, {"b", w, h}};
    scale_grad(ps, 0.5);
    CHECK(g.data()[0] == 0.75);
    CHECK(g.data()[1] == -2.0);
    CHECK(h.data()[0] == 1.5);
    CHECK_THROWS_MATCHES(scale_grad(ps, std::numeric_limits<double>::infinity()),
                         std::invalid_argument,
                         Message("headwise::scale_grad: factor: must be finite, got inf"));
    CHECK(g.data()[0] == 0.75);
}

}  // namespace test_grad_accumulation
