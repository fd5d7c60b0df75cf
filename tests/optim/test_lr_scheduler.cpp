// SPDX-License-Identifier: MIT
// Tests of the learning-rate schedules and LRScheduler: torch 1.13's rates step for step, the
// optimisers' steps at those rates, exact resume from a state dict, and the errors.
#include <headwise/io/npy.hpp>
#include <headwise/optim/adam.hpp>
#include <headwise/optim/lr_scheduler.hpp>
#include <headwise/optim/schedules.hpp>
#include <headwise/optim/sgd.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <limits>     // std::numeric_limits
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"

namespace test_lr_scheduler {

using namespace headwise;

namespace {

constexpr double kBaseLr = 0.1;  // tests/golden/make_lr_schedule_golden.py's BASE_LR
constexpr Index kSteps = 30;     // and STEPS

double lambda_factor(Index epoch) { return 1.0 / (1.0 + 0.1 * static_cast<double>(epoch)); }

/// The schedule of each case of make_lr_schedule_golden.py, by name.
Schedule golden_schedule(const std::string& name) {
    if (name == "constant") return ConstantLR(1.0 / 3, 5);
    if (name == "linear") return LinearLR(0.25, 1.0, 10);
    if (name == "linear_decay") return LinearLR(1.0, 0.0, 20);
    if (name == "cosine") return CosineAnnealingLR(12, 0.001);
    if (name == "cosine_zero") return CosineAnnealingLR(30);
    if (name == "step") return StepLR(4, 0.5);
    if (name == "multistep") return MultiStepLR({5, 12, 12, 20}, 0.3);
    if (name == "lambda") return LambdaLR(lambda_factor);
    if (name == "warmup_cosine")
        return SequentialLR({LinearLR(0.01, 1.0, 5), CosineAnnealingLR(25, 1e-4)}, {5});
    if (name == "warmup_linear")
        return SequentialLR({LinearLR(0.1, 1.0, 6), LinearLR(1.0, 0.0, 24)}, {6});
    if (name == "three_phases")
        return SequentialLR({ConstantLR(0.5, 3), StepLR(3, 0.5), CosineAnnealingLR(10)}, {4, 12});
    FAIL("no schedule for golden case " << name);
    return ConstantLR();
}

Tensor<double> golden_rates(const std::string& file) {
    return load_npy<double>((test::golden_dir() / "lr_schedule" / file).string());
}

/// |a - b| <= rel |b|; exact zeros compare equal only to zero.
bool close(double a, double b, double rel) { return std::abs(a - b) <= rel * std::abs(b); }

/// One parameter and its gradient, for an optimiser to hold.
template <class T>
struct OneParameter {
    Tensor<T> value{Shape{3}}, grad{Shape{3}};
    std::vector<Parameter<T>> views() { return {{"p", value, grad}}; }
};

template <class T>
SGDOptions sgd_options(double lr) {
    SGDOptions o;
    o.lr = lr;
    return o;
}

}  // namespace

TEMPLATE_TEST_CASE("every schedule gives torch 1.13's learning rates over 30 steps",
                   "[optim][lr_scheduler][golden]", float, double) {
    using T = TestType;
    const std::string name =
        GENERATE("constant", "linear", "linear_decay", "cosine", "cosine_zero", "step", "multistep",
                 "lambda", "warmup_cosine", "warmup_linear", "three_phases");
    CAPTURE(name);
    const Tensor<double> want = golden_rates(name + ".npy");  // [kSteps + 1], torch's step()
    REQUIRE(want.numel() == kSteps + 1);
    const bool cosine = name.rfind("cosine", 0) == 0;
    const Tensor<double> closed = cosine ? golden_rates(name + ".closed_form.npy") : want;

    OneParameter<T> p;
    SGD<T> opt(p.views(), sgd_options<T>(kBaseLr));
    LRScheduler sched(opt, golden_schedule(name));
    CHECK(sched.base_lr() == kBaseLr);
    for (Index epoch = 0; epoch <= kSteps; ++epoch) {
        if (epoch > 0) {
            opt.step();
            sched.step();
        }
        CAPTURE(epoch, sched.get_last_lr(), want.data()[epoch], closed.data()[epoch]);
        CHECK(sched.last_epoch() == epoch);
        CHECK(opt.options().lr == sched.get_last_lr());
        // Against torch's step() (recursive forms) to 1e-12; the cosine closed form, which is
        // the same expression as torch's _get_closed_form_lr, to the last bit or two.
        CHECK(close(sched.get_last_lr(), want.data()[epoch], 1e-12));
        if (cosine) CHECK(close(sched.get_last_lr(), closed.data()[epoch], 4e-16));
    }
}

TEMPLATE_TEST_CASE("SGD, Adam and AdamW step with the scheduled rate", "[optim][lr_scheduler]",
                   float, double) {
    using T = TestType;
    OneParameter<T> p, q, r;
    SGD<T> sgd(p.views(), sgd_options<T>(0.5));
    AdamOptions ao;
    ao.lr = 0.5;
    Adam<T> adam(q.views(), ao);
    AdamW<T> adamw(r.views(), ao);
    LRScheduler s1(sgd, StepLR(1, 0.5));  // 0.5, 0.25, 0.125, ...
    LRScheduler s2(adam, StepLR(1, 0.5));
    LRScheduler s3(adamw, StepLR(1, 0.5));
    CHECK(adam.options().lr == 0.5);
    for (int step = 1; step <= 3; ++step) {
        s1.step();
        s2.step();
        s3.step();
    }
    CHECK(sgd.options().lr == 0.0625);
    CHECK(adam.options().lr == 0.0625);
    CHECK(adamw.options().lr == 0.0625);
    // p - lr g with the scheduled lr.
    p.grad.data()[0] = T(2);
    sgd.step();
    CHECK(p.value.data()[0] == T(-0.125));
}

TEMPLATE_TEST_CASE("a scheduler loaded from a state dict continues the schedule exactly",
                   "[optim][lr_scheduler][state]", float, double) {
    using T = TestType;
    const std::string name = GENERATE("warmup_cosine", "lambda", "multistep");
    CAPTURE(name);
    OneParameter<T> p, q;
    SGD<T> a(p.views(), sgd_options<T>(kBaseLr));
    LRScheduler run(a, golden_schedule(name));
    for (int step = 1; step <= 17; ++step) run.step();
    const StateDict<T> sd = run.state_dict();
    REQUIRE(sd.size() == 3);
    CHECK(sd.at("last_epoch").shape() == Shape{});
    CHECK(sd.at("last_epoch").data()[0] == T(17));
    CHECK(sd.at("base_lrs").data()[0] == static_cast<T>(kBaseLr));
    CHECK(sd.at("_last_lr").data()[0] == static_cast<T>(run.get_last_lr()));

    // A new optimiser and scheduler, as a resumed run makes them: the same base rate.
    SGD<T> b(q.views(), sgd_options<T>(kBaseLr));
    LRScheduler resumed(b, golden_schedule(name));
    resumed.load_state_dict(sd);
    CHECK(resumed.last_epoch() == 17);
    CHECK(resumed.base_lr() == kBaseLr);  // its own, exact, even from a float dict
    CHECK(b.options().lr == a.options().lr);
    for (int step = 18; step <= 30; ++step) {
        run.step();
        resumed.step();
        CAPTURE(step);
        CHECK(resumed.get_last_lr() == run.get_last_lr());  // bit for bit
        CHECK(b.options().lr == a.options().lr);
    }
}

TEST_CASE("a state dict's base rate replaces the optimiser's when they differ",
          "[optim][lr_scheduler][state]") {
    OneParameter<double> p, q;
    SGD<double> a(p.views(), sgd_options<double>(0.1));
    LRScheduler run(a, CosineAnnealingLR(20));
    for (int step = 1; step <= 5; ++step) run.step();
    SGD<double> b(q.views(), sgd_options<double>(0.7));
    LRScheduler resumed(b, CosineAnnealingLR(20));
    resumed.load_state_dict(run.state_dict());
    CHECK(resumed.base_lr() == 0.1);
    CHECK(b.options().lr == a.options().lr);
    run.step();
    resumed.step();
    CHECK(resumed.get_last_lr() == run.get_last_lr());
}

TEST_CASE("schedules reject torch's invalid arguments with the argument and the value",
          "[optim][lr_scheduler][errors]") {
    CHECK_THROWS_MATCHES(ConstantLR(1.5), std::invalid_argument,
                         Message("headwise::ConstantLR: factor: must be in [0, 1], got 1.5"));
    CHECK_THROWS_MATCHES(ConstantLR(0.5, -1), std::invalid_argument,
                         Message("headwise::ConstantLR: total_iters: must be at least 0, got -1"));
    CHECK_THROWS_MATCHES(LinearLR(0.0), std::invalid_argument,
                         Message("headwise::LinearLR: start_factor: must be in (0, 1], got 0"));
    CHECK_THROWS_MATCHES(LinearLR(0.5, 1.25), std::invalid_argument,
                         Message("headwise::LinearLR: end_factor: must be in [0, 1], got 1.25"));
    CHECK_THROWS_MATCHES(LinearLR(0.5, 1.0, 0), std::invalid_argument,
                         Message("headwise::LinearLR: total_iters: must be at least 1, got 0"));
    CHECK_THROWS_MATCHES(CosineAnnealingLR(0), std::invalid_argument,
                         Message("headwise::CosineAnnealingLR: T_max: must be at least 1, got 0"));
    CHECK_THROWS_MATCHES(CosineAnnealingLR(10, -0.001), std::invalid_argument,
                         Message("headwise::CosineAnnealingLR: eta_min: must be finite and "
                                 "non-negative, got -0.001"));
    CHECK_THROWS_MATCHES(StepLR(0), std::invalid_argument,
                         Message("headwise::StepLR: step_size: must be at least 1, got 0"));
    CHECK_THROWS_MATCHES(StepLR(4, -0.5), std::invalid_argument,
                         Message("headwise::StepLR: gamma: must be finite and non-negative, got "
                                 "-0.5"));
    CHECK_THROWS_MATCHES(MultiStepLR({3, -1}), std::invalid_argument,
                         Message("headwise::MultiStepLR: milestones[1]: must be non-negative, "
                                 "got -1"));
    CHECK_THROWS_MATCHES(LambdaLR(nullptr), std::invalid_argument,
                         Message("headwise::LambdaLR: lr_lambda: must be a function, got an empty "
                                 "std::function"));
    CHECK_THROWS_MATCHES(SequentialLR({}, {}), std::invalid_argument,
                         Message("headwise::SequentialLR: schedules: must hold at least one "
                                 "schedule, got none"));
    CHECK_THROWS_MATCHES(SequentialLR({LinearLR(), CosineAnnealingLR(5)}, {}),
                         std::invalid_argument,
                         Message("headwise::SequentialLR: milestones: must have one entry fewer "
                                 "than schedules (2 schedules), got 0 entries"));
    CHECK_THROWS_MATCHES(
        SequentialLR({LinearLR(), CosineAnnealingLR(5)}, {0}), std::invalid_argument,
        Message("headwise::SequentialLR: milestones[0]: must be at least 1, got 0"));
    CHECK_THROWS_MATCHES(
        SequentialLR({LinearLR(), StepLR(2), CosineAnnealingLR(5)}, {5, 5}), std::invalid_argument,
        Message("headwise::SequentialLR: milestones[1]: must be greater than milestones[0] = 5, "
                "got 5"));
    // The largest Index as a milestone: the check must not compute milestones[0] + 1.
    constexpr Index kMax = std::numeric_limits<Index>::max();
    CHECK_THROWS_MATCHES(
        SequentialLR({LinearLR(), StepLR(2), CosineAnnealingLR(5)}, {kMax, 5}),
        std::invalid_argument,
        Message("headwise::SequentialLR: milestones[1]: must be greater than milestones[0] = "
                "9223372036854775807, got 5"));
    CHECK_THROWS_MATCHES(
        SequentialLR({LinearLR(), StepLR(2), CosineAnnealingLR(5)}, {kMax, kMax}),
        std::invalid_argument,
        Message("headwise::SequentialLR: milestones[1]: must be greater than milestones[0] = "
                "9223372036854775807, got 9223372036854775807"));
    const SequentialLR last({ConstantLR(0.5, kMax), StepLR(2)}, {kMax});
    CHECK(last.lr(1.0, kMax - 1) == 0.5);
    CHECK(last.lr(1.0, kMax) == 1.0);
    // MultiStepLR counts a repeated milestone twice and sorts them, as torch's Counter does.
    const MultiStepLR m({7, 2, 7}, 0.5);
    CHECK(m.milestones() == std::vector<Index>{2, 7, 7});
    CHECK(m.lr(1.0, 6) == 0.5);
    CHECK(m.lr(1.0, 7) == 0.125);
}

TEST_CASE("a schedule's invalid rate throws before the optimiser changes",
          "[optim][lr_scheduler][errors]") {
    OneParameter<float> p;
    SGD<float> opt(p.views(), sgd_options<float>(0.1));
    CHECK_THROWS_MATCHES(LRScheduler(opt, LambdaLR([](Index) { return -1.0; })),
                         std::invalid_argument,
                         Message("headwise::LRScheduler::LRScheduler: the learning rate of "
                                 "headwise::LambdaLR at epoch 0 from base_lr 0.1: must be finite "
                                 "and non-negative, got -0.1"));
    CHECK(opt.options().lr == 0.1);
    LRScheduler sched(opt, LambdaLR([](Index e) { return e < 3 ? 0.5 : -1.0; }));
    sched.step();
    sched.step();
    CHECK_THROWS_MATCHES(sched.step(), std::invalid_argument,
                         Message("headwise::LRScheduler::step: the learning rate of "
                                 "headwise::LambdaLR at epoch 3 from base_lr 0.1: must be finite "
                                 "and non-negative, got -0.1"));
    CHECK(sched.last_epoch() == 2);
    CHECK(sched.get_last_lr() == 0.05);
    CHECK(opt.options().lr == 0.05);
}

TEST_CASE("load_state_dict is strict and checks the dict against the schedule",
          "[optim][lr_scheduler][errors][state]") {
    OneParameter<double> p, q;
    SGD<double> a(p.views(), sgd_options<double>(0.1));
    LRScheduler other(a, StepLR(3, 0.5));
    for (int step = 1; step <= 9; ++step) other.step();  // 0.1 * 0.5^3
    SGD<double> b(q.views(), sgd_options<double>(0.1));
    LRScheduler sched(b, StepLR(4, 0.5));
    const std::string fn = "headwise::LRScheduler::load_state_dict: ";

    StateDict<double> sd = other.state_dict();
    CHECK_THROWS_MATCHES(
        sched.load_state_dict(sd), std::invalid_argument,
        Message(fn + "_last_lr: must be headwise::StepLR's learning rate at last_epoch "
                     "9 from base_lrs 0.1, 0.025 (a state dict of another schedule?), "
                     "got 0.0125"));
    sd.erase("_last_lr");
    CHECK_THROWS_MATCHES(sched.load_state_dict(sd), std::invalid_argument,
                         Message(fn + "_last_lr: missing from the state dict, expected shape [1]"));
    sd = other.state_dict();
    sd.emplace("T_max", Tensor<double>(Shape{}));
    CHECK_THROWS_MATCHES(sched.load_state_dict(sd), std::invalid_argument,
                         Message(fn + "T_max: unexpected key in the state dict (shape []); "
                                      "expected last_epoch, base_lrs, _last_lr"));
    sd = other.state_dict();
    sd.at("last_epoch").data()[0] = 2.5;
    CHECK_THROWS_MATCHES(sched.load_state_dict(sd), std::invalid_argument,
                         Message(fn + "last_epoch: must be an integer in [0, 9007199254740992], "
                                      "got 2.5"));
    sd = other.state_dict();
    sd.at("base_lrs").data()[0] = -1.0;
    CHECK_THROWS_MATCHES(sched.load_state_dict(sd), std::invalid_argument,
                         Message(fn + "base_lrs: must be finite and non-negative, got -1"));
    // Nothing changed.
    CHECK(sched.last_epoch() == 0);
    CHECK(b.options().lr == 0.1);
}

}  // namespace test_lr_scheduler
