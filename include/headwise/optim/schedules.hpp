// SPDX-License-Identifier: MIT
// Learning-rate schedules of torch.optim.lr_scheduler as closed forms: ConstantLR, LinearLR,
// CosineAnnealingLR, StepLR, MultiStepLR, LambdaLR, SequentialLR, and Schedule holding any.
#pragma once

#include <algorithm>    // std::sort, std::upper_bound
#include <cmath>        // std::cos, std::pow, std::isfinite
#include <cstddef>      // std::size_t
#include <functional>   // std::function
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::enable_if_t, std::is_convertible_v, std::decay_t
#include <utility>      // std::move, std::declval
#include <vector>       // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "detail/optimizer_state.hpp"
#include "detail/schedule_checks.hpp"

namespace headwise {

// A schedule is a value: its hyper-parameters and `lr(base_lr, epoch)`, the learning rate at
// `epoch` (0, 1, 2, ...) of a run whose optimiser started at `base_lr`. LRScheduler
// (lr_scheduler.hpp) binds one to an optimiser and steps it as torch does. Each schedule is
// torch's _get_closed_form_lr, the same expression in the same order; torch's step() follows a
// recursive ("chainable") form of it instead, which agrees up to rounding in the last bits
// (about 1e-16 relative over 30 steps for these schedules). The closed form has no state beyond
// the epoch, so a run resumed at any epoch continues exactly. Constructors check torch's
// preconditions and throw std::invalid_argument naming the schedule and the argument.

/// torch.optim.lr_scheduler.ConstantLR: base_lr * factor before epoch total_iters, base_lr from
/// then on. factor in [0, 1], total_iters >= 0.
class ConstantLR {
public:
    static constexpr const char* kName = "headwise::ConstantLR";
    explicit ConstantLR(double factor = 1.0 / 3, Index total_iters = 5);
    double lr(double base_lr, Index epoch) const;
    double factor() const noexcept { return factor_; }
    Index total_iters() const noexcept { return total_iters_; }

private:
    double factor_;
    Index total_iters_;
};

/// torch.optim.lr_scheduler.LinearLR: the factor goes linearly from start_factor at epoch 0 to
/// end_factor at epoch total_iters and stays there:
///   base_lr * (start + (end - start) * min(total_iters, epoch) / total_iters)
/// start_factor in (0, 1] (torch 1.13 accepts 0 but its recursive step then divides by zero;
/// later versions reject it), end_factor in [0, 1] (0 decays to zero), total_iters >= 1.
class LinearLR {
public:
    static constexpr const char* kName = "headwise::LinearLR";
    explicit LinearLR(double start_factor = 1.0 / 3, double end_factor = 1.0,
                      Index total_iters = 5);
    double lr(double base_lr, Index epoch) const;
    double start_factor() const noexcept { return start_factor_; }
    double end_factor() const noexcept { return end_factor_; }
    Index total_iters() const noexcept { return total_iters_; }

private:
    double start_factor_, end_factor_;
    Index total_iters_;
};

/// torch.optim.lr_scheduler.CosineAnnealingLR (Loshchilov and Hutter 2017, SGDR, Eq. 5 without
/// restarts):
///   eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
/// base_lr at epoch 0, eta_min at T_max; past T_max the cosine goes on (back up to base_lr at
/// 2 T_max), as torch's. This is torch's closed form (_get_closed_form_lr); torch's step()
/// computes each value recursively from the previous one, which can differ in the last bits.
/// T_max >= 1, eta_min finite and non-negative.
class CosineAnnealingLR {
public:
    static constexpr const char* kName = "headwise::CosineAnnealingLR";
    explicit CosineAnnealingLR(Index T_max, double eta_min = 0.0);
    double lr(double base_lr, Index epoch) const;
    Index T_max() const noexcept { return T_max_; }
    double eta_min() const noexcept { return eta_min_; }

private:
    Index T_max_;
    double eta_min_;
};

/// torch.optim.lr_scheduler.StepLR: base_lr * gamma^(epoch / step_size) (integer division).
/// step_size >= 1, gamma finite and non-negative.
class StepLR {
public:
    static constexpr const char* kName = "headwise::StepLR";
    explicit StepLR(Index step_size, double gamma = 0.1);
    double lr(double base_lr, Index epoch) const;
    Index step_size() const noexcept { return step_size_; }
    double gamma() const noexcept { return gamma_; }

private:
    Index step_size_;
    double gamma_;
};

/// torch.optim.lr_scheduler.MultiStepLR: base_lr * gamma^(number of milestones <= epoch). A
/// milestone listed twice counts twice, as in torch (a Counter there); the order does not
/// matter. Milestones >= 0, gamma finite and non-negative.
class MultiStepLR {
public:
    static constexpr const char* kName = "headwise::MultiStepLR";
    explicit MultiStepLR(std::vector<Index> milestones, double gamma = 0.1);
    double lr(double base_lr, Index epoch) const;
    const std::vector<Index>& milestones() const noexcept { return milestones_; }  // sorted
    double gamma() const noexcept { return gamma_; }

private:
    std::vector<Index> milestones_;
    double gamma_;
};

/// torch.optim.lr_scheduler.LambdaLR: base_lr * lr_lambda(epoch). The function must be pure (the
/// same factor for the same epoch), so that a resumed run gets the same rates; LRScheduler
/// rejects a factor that gives a negative or non-finite learning rate. E.g. the linear warm-up
/// from 0 and linear decay of many transformer recipes, W warm-up steps of N:
///   LambdaLR([=](Index s) {
///       return s < W ? double(s) / W : std::max(0.0, double(N - s) / double(N - W));
///   })
class LambdaLR {
public:
    static constexpr const char* kName = "headwise::LambdaLR";
    explicit LambdaLR(std::function<double(Index)> lr_lambda);
    double lr(double base_lr, Index epoch) const;

private:
    std::function<double(Index)> lr_lambda_;
};

/// Any schedule above (or a user's class with `static constexpr const char* kName` and
/// `double lr(double base_lr, Index epoch) const`), held by value: what SequentialLR chains and
/// LRScheduler steps.
class Schedule {
public:
    template <class S, class = std::enable_if_t<detail::is_schedule<std::decay_t<S>>::value &&
                                                !std::is_same_v<std::decay_t<S>, Schedule>>>
    Schedule(S&& schedule)  // NOLINT(google-explicit-constructor): any schedule converts
        : name_(std::decay_t<S>::kName),
          lr_([s = std::forward<S>(schedule)](double base_lr, Index epoch) {
              return static_cast<double>(s.lr(base_lr, epoch));
          }) {}

    double lr(double base_lr, Index epoch) const { return lr_(base_lr, epoch); }
    /// The schedule's kName, e.g. "headwise::CosineAnnealingLR", for messages.
    const std::string& name() const noexcept { return name_; }

private:
    std::string name_;
    std::function<double(double, Index)> lr_;
};

/// torch.optim.lr_scheduler.SequentialLR: schedules[0] until epoch milestones[0], then
/// schedules[1] restarted at its epoch 0, and so on; every part starts from the same base_lr.
/// At overall epoch e, with i the number of milestones <= e, the rate is
///   schedules[i].lr(base_lr, e - milestones[i - 1])     (e itself for i = 0)
/// which is what torch's SequentialLR gives (it steps part i with step(0) at its milestone,
/// which takes the closed form at epoch 0). Linear warm-up over W steps, then cosine decay to
/// the end of N steps:
///   SequentialLR({LinearLR(0.01, 1.0, W), CosineAnnealingLR(N - W)}, {W})
/// or linear decay to zero instead:
///   SequentialLR({LinearLR(0.01, 1.0, W), LinearLR(1.0, 0.0, N - W)}, {W})
/// At least one schedule; one milestone fewer than schedules (torch's rule); milestones
/// strictly increasing and >= 1.
class SequentialLR {
public:
    static constexpr const char* kName = "headwise::SequentialLR";
    SequentialLR(std::vector<Schedule> schedules, std::vector<Index> milestones);
    double lr(double base_lr, Index epoch) const;
    const std::vector<Schedule>& schedules() const noexcept { return schedules_; }
    const std::vector<Index>& milestones() const noexcept { return milestones_; }

private:
    std::vector<Schedule> schedules_;
    std::vector<Index> milestones_;
};

// ---- definitions ----------------------------------------------------------------------------

inline ConstantLR::ConstantLR(double factor, Index total_iters)
    : factor_(factor), total_iters_(total_iters) {
    if (!(factor >= 0.0 && factor <= 1.0))
        throw_invalid_argument(kName, "factor", "must be in [0, 1]", detail::exact_decimal(factor));
    detail::check_at_least(kName, "total_iters", total_iters, 0);
}

inline double ConstantLR::lr(double base_lr, Index epoch) const {
    return base_lr * (factor_ + (epoch >= total_iters_ ? 1.0 - factor_ : 0.0));
}

inline LinearLR::LinearLR(double start_factor, double end_factor, Index total_iters)
    : start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
    if (!(start_factor > 0.0 && start_factor <= 1.0))
        throw_invalid_argument(kName, "start_factor", "must be in (0, 1]",
                               detail::exact_decimal(start_factor));
    if (!(end_factor >= 0.0 && end_factor <= 1.0))
        throw_invalid_argument(kName, "end_factor", "must be in [0, 1]",
                               detail::exact_decimal(end_factor));
    detail::check_at_least(kName, "total_iters", total_iters, 1);
}

inline double LinearLR::lr(double base_lr, Index epoch) const {
    const double done = static_cast<double>(std::min(total_iters_, epoch));
    return base_lr * (start_factor_ +
                      (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_));
}

inline CosineAnnealingLR::CosineAnnealingLR(Index T_max, double eta_min)
    : T_max_(T_max), eta_min_(eta_min) {
    detail::check_at_least(kName, "T_max", T_max, 1);
    detail::check_finite_non_negative(kName, "eta_min", eta_min);
}

inline double CosineAnnealingLR::lr(double base_lr, Index epoch) const {
    constexpr double pi = 3.141592653589793;  // math.pi
    return eta_min_ +
           (base_lr - eta_min_) *
               (1.0 + std::cos(pi * static_cast<double>(epoch) / static_cast<double>(T_max_))) /
               2.0;
}

inline StepLR::StepLR(Index step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
    detail::check_at_least(kName, "step_size", step_size, 1);
    detail::check_finite_non_negative(kName, "gamma", gamma);
}

inline double StepLR::lr(double base_lr, Index epoch) const {
    return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

inline MultiStepLR::MultiStepLR(std::vector<Index> milestones, double gamma)
    : milestones_(std::move(milestones)), gamma_(gamma) {
    for (std::size_t i = 0; i < milestones_.size(); ++i)
        if (milestones_[i] < 0)
            throw_invalid_argument(kName, "milestones[" + std::to_string(i) + "]",
                                   "must be non-negative", std::to_string(milestones_[i]));
    detail::check_finite_non_negative(kName, "gamma", gamma);
    std::sort(milestones_.begin(), milestones_.end());
}

inline double MultiStepLR::lr(double base_lr, Index epoch) const {
    const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) -
                        milestones_.begin();  // bisect_right
    return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

inline LambdaLR::LambdaLR(std::function<double(Index)> lr_lambda)
    : lr_lambda_(std::move(lr_lambda)) {
    if (!lr_lambda_)
        throw_invalid_argument(kName, "lr_lambda", "must be a function", "an empty std::function");
}

inline double LambdaLR::lr(double base_lr, Index epoch) const {
    return base_lr * lr_lambda_(epoch);
}

inline SequentialLR::SequentialLR(std::vector<Schedule> schedules, std::vector<Index> milestones)
    : schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
    if (schedules_.empty())
        throw_invalid_argument(kName, "schedules", "must hold at least one schedule", "none");
    if (milestones_.size() + 1 != schedules_.size())
        throw_invalid_argument(kName, "milestones",
                               "must have one entry fewer than schedules (" +
                                   std::to_string(schedules_.size()) + " schedules)",
                               std::to_string(milestones_.size()) + " entries");
    for (std::size_t i = 0; i < milestones_.size(); ++i) {
        // Compared with the previous milestone itself, not with it + 1, which overflows at the
        // largest Index.
        if (i == 0 ? milestones_[i] < 1 : milestones_[i] <= milestones_[i - 1])
            throw_invalid_argument(kName, "milestones[" + std::to_string(i) + "]",
                                   i == 0 ? "must be at least 1"
                                          : "must be greater than milestones[" +
                                                std::to_string(i - 1) +
                                                "] = " + std::to_string(milestones_[i - 1]),
                                   std::to_string(milestones_[i]));
    }
}

inline double SequentialLR::lr(double base_lr, Index epoch) const {
    const auto i = static_cast<std::size_t>(
        std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
    return schedules_[i].lr(base_lr, i == 0 ? epoch : epoch - milestones_[i - 1]);
}

}  // namespace headwise
