// SPDX-License-Identifier: MIT
// LRScheduler<Optimizer>: a schedule (schedules.hpp) bound to an optimiser, stepped as torch's.
#pragma once

#include <cmath>        // std::floor, std::isfinite
#include <limits>       // std::numeric_limits
#include <map>          // std::map
#include <stdexcept>    // std::invalid_argument, std::overflow_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::decay_t, std::is_convertible_v, std::void_t, std::is_same_v
#include <utility>      // std::move, std::declval

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../layers/module.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "adam.hpp"  // the schedules over Adam and AdamW that headwise::compiled holds
#include "detail/optimizer_state.hpp"
#include "detail/optimizer_traits.hpp"
#include "schedules.hpp"
#include "sgd.hpp"  // and over SGD

namespace headwise {

/// A learning-rate scheduler as torch.optim.lr_scheduler's, for SGD<T>, Adam<T> and AdamW<T>
/// (or any optimiser with options().lr, set_lr(double) and parameters()):
///
///   headwise::AdamW<float> opt(model.parameters(), options);       // options.lr: the peak rate
///   headwise::LRScheduler sched(opt, headwise::SequentialLR(
///       {headwise::LinearLR(0.01, 1.0, warmup), headwise::CosineAnnealingLR(steps - warmup)},
///       {warmup}));                                                 // opt's lr: epoch 0's
///   for (int step = 1; step <= steps; ++step) {
///       ... forward, backward ...
///       opt.step();
///       sched.step();                                               // after opt.step(), as torch
///   }
///
/// torch's `LinearLR(opt, 0.01, 1.0, 100)` is `LRScheduler sched(opt, LinearLR(0.01, 1.0, 100))`
/// here, and so for each schedule. As in torch, the base learning rate (torch's base_lrs[0]) is
/// the optimiser's at construction, and construction sets the optimiser's rate to the schedule's
/// at epoch 0 (last_epoch() == 0); each step() adds one to last_epoch() and sets the rate at the
/// new epoch; get_last_lr() is the rate last set (torch returns one per parameter group; these
/// optimisers have one group). The optimiser must outlive the scheduler; one scheduler per
/// optimiser (two would both set its rate; torch's chaining of schedulers is not supported,
/// SequentialLR is).
///
/// state_dict() holds torch's names (rank 0 or [1], the optimiser's scalar type T):
///   last_epoch     the epoch of the current rate
///   base_lrs       [1]: the base learning rate
///   _last_lr       [1]: get_last_lr()
/// Rates follow from the epoch and the base rate by a closed form, so loading restores the rate
/// exactly. Last epochs are exact up to 2^24 in float and 2^53 in double; state_dict() throws
/// std::overflow_error past that. io::Checkpoint keeps it beside the optimiser's state
/// (Checkpoint::scheduler). When the scheduler steps once per optimiser step, last_epoch
/// is also io::Checkpoint's step, so a resumed run may instead make its scheduler (before
/// loading the optimiser's state, whose lr is not the base rate) and step it that many times:
/// the rates come out the same (examples/train_sort.cpp does).
template <class Optimizer>
class LRScheduler {
    static_assert(detail::is_lr_optimizer<Optimizer>::value,
                  "headwise::LRScheduler needs an optimiser with options().lr, set_lr(double) and "
                  "parameters(), such as SGD<T>, Adam<T> or AdamW<T>");

public:
    /// The optimiser's scalar type (float or double): the state dict's.
    using value_type = typename detail::parameter_scalar<typename std::decay_t<
        decltype(std::declval<const Optimizer&>().parameters())>::value_type>::type;

    /// Binds `schedule` to `optimizer`, whose current rate becomes the base rate, and sets the
    /// rate at epoch 0. Throws std::invalid_argument when that rate is negative or not finite
    /// (a LambdaLR's factor), before the optimiser changes.
    LRScheduler(Optimizer& optimizer, Schedule schedule);

    /// Moves to the next epoch and sets the optimiser's rate to the schedule's there. Throws
    /// std::invalid_argument when that rate is negative or not finite, before anything changes.
    void step();

    /// The rate last set (torch's get_last_lr()[0]).
    double get_last_lr() const noexcept { return last_lr_; }
    Index last_epoch() const noexcept { return last_epoch_; }
    /// The optimiser's rate when the scheduler was made (torch's base_lrs[0]).
    double base_lr() const noexcept { return base_lr_; }
    const Schedule& schedule() const noexcept { return schedule_; }

    /// last_epoch, base_lrs and _last_lr as T tensors (see the class comment).
    StateDict<value_type> state_dict() const;
    /// Strict load of a state_dict() of a scheduler with the same schedule: a missing,
    /// unexpected or mis-shaped key, a last_epoch that is not a non-negative integer, a negative
    /// or non-finite base_lrs, or a _last_lr that is not this schedule's rate at last_epoch
    /// from base_lrs (a dict of another schedule) throws std::invalid_argument naming the key,
    /// before anything changes. Then sets last_epoch, the base rate (this scheduler's own when
    /// the stored one is it rounded to T, so that a float dict restores a double rate exactly)
    /// and the optimiser's rate to the schedule's at last_epoch.
    void load_state_dict(const StateDict<value_type>& state);

private:
    /// The schedule's rate at `epoch`, checked.
    double rate(const char* fn, double base_lr, Index epoch) const;

    using T = value_type;
    // Epochs T holds exactly, every smaller one too: 2^24 (float), 2^53 (double).
    static constexpr Index kMaxEpoch = Index{1} << std::numeric_limits<T>::digits;

    Optimizer* optimizer_;
    Schedule schedule_;
    double base_lr_;
    Index last_epoch_ = 0;
    double last_lr_ = 0.0;
};

// ---- definitions ----------------------------------------------------------------------------

template <class Optimizer>
LRScheduler<Optimizer>::LRScheduler(Optimizer& optimizer, Schedule schedule)
    : optimizer_(&optimizer),
      schedule_(std::move(schedule)),
      base_lr_(static_cast<double>(optimizer.options().lr)) {
    last_lr_ = rate("headwise::LRScheduler::LRScheduler", base_lr_, 0);
    optimizer_->set_lr(last_lr_);
}

template <class Optimizer>
double LRScheduler<Optimizer>::rate(const char* fn, double base_lr, Index epoch) const {
    const double lr = schedule_.lr(base_lr, epoch);
    if (!(lr >= 0.0) || !std::isfinite(lr))
        throw_invalid_argument(fn,
                               "the learning rate of " + schedule_.name() + " at epoch " +
                                   std::to_string(epoch) + " from base_lr " +
                                   detail::exact_decimal(base_lr),
                               "must be finite and non-negative", detail::exact_decimal(lr));
    return lr;
}

template <class Optimizer>
void LRScheduler<Optimizer>::step() {
    const Index epoch = last_epoch_ + 1;
    const double lr = rate("headwise::LRScheduler::step", base_lr_, epoch);
    optimizer_->set_lr(lr);
    last_epoch_ = epoch;
    last_lr_ = lr;
}

template <class Optimizer>
StateDict<typename LRScheduler<Optimizer>::value_type> LRScheduler<Optimizer>::state_dict() const {
    if (last_epoch_ > kMaxEpoch)
        throw std::overflow_error(
            "headwise::LRScheduler::state_dict: last_epoch: " + std::to_string(last_epoch_) +
            " is past the largest epoch " + (std::is_same_v<T, float> ? "float" : "double") +
            " holds exactly, " + std::to_string(kMaxEpoch));
    StateDict<T> sd;
    sd.emplace("last_epoch", detail::scalar_tensor<T>(static_cast<double>(last_epoch_)));
    sd.emplace("base_lrs", Tensor<T>(Shape{1}, {static_cast<T>(base_lr_)}));
    sd.emplace("_last_lr", Tensor<T>(Shape{1}, {static_cast<T>(last_lr_)}));
    return sd;
}

template <class Optimizer>
void LRScheduler<Optimizer>::load_state_dict(const StateDict<T>& state) {
    const std::string fn = "headwise::LRScheduler::load_state_dict";
    detail::check_state_keys<T>(
        fn, state, {{"last_epoch", Shape{}}, {"base_lrs", Shape{1}}, {"_last_lr", Shape{1}}},
        "last_epoch, base_lrs, _last_lr");
    const T t = state.at("last_epoch").data()[0];
    if (!(t >= T(0) && t <= static_cast<T>(kMaxEpoch) && std::floor(t) == t))
        throw_invalid_argument(fn, "last_epoch",
                               "must be an integer in [0, " + std::to_string(kMaxEpoch) + "]",
                               detail::exact_decimal(t));
    const Index epoch = static_cast<Index>(t);
    const double base = detail::restored_lr(fn, "base_lrs", state.at("base_lrs"), base_lr_);
    const double lr = rate(fn.c_str(), base, epoch);
    const T stored = state.at("_last_lr").data()[0];
    if (!(stored == static_cast<T>(lr)))
        throw_invalid_argument(fn, "_last_lr",
                               "must be " + schedule_.name() + "'s learning rate at last_epoch " +
                                   std::to_string(epoch) + " from base_lrs " +
                                   detail::exact_decimal(static_cast<T>(base)) + ", " +
                                   detail::exact_decimal(static_cast<T>(lr)) +
                                   " (a state dict of another schedule?)",
                               detail::exact_decimal(stored));

    // Everything checked: assign.
    optimizer_->set_lr(lr);
    base_lr_ = base;
    last_epoch_ = epoch;
    last_lr_ = lr;
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_LR_SCHEDULER_TEMPLATES(C, F, T) \
    C(class, LRScheduler<SGD<T>>)                       \
    C(class, LRScheduler<Adam<T>>)                      \
    C(class, LRScheduler<AdamW<T>>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_LR_SCHEDULER_TEMPLATES);
