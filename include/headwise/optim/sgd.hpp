// SPDX-License-Identifier: MIT
// SGD<T>: torch.optim.SGD (momentum, dampening, Nesterov, weight decay) over module parameters.
#pragma once

#include <algorithm>  // std::fill_n
#include <cmath>      // std::isfinite
#include <cstddef>    // std::size_t
#include <string>     // std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../layers/module.hpp"
#include "../tensor.hpp"

namespace headwise {

/// The arguments of torch.optim.SGD.
struct SGDOptions {
    double lr = 1e-3;
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay = 0.0;  // L2 penalty added to the gradient
    bool nesterov = false;      // needs momentum > 0 and dampening == 0, as in torch
};

/// Stochastic gradient descent as torch.optim.SGD (1.13, maximize = false), per parameter p with
/// gradient g:
///   d = g + weight_decay p
///   b = d at the first step, else momentum b + (1 - dampening) d          (momentum != 0)
///   d = d + momentum b (Nesterov) or d = b                                  (momentum != 0)
///   p = p - lr d
/// The parameters are views (from Module::parameters()): the modules must outlive the optimiser
/// and keep their parameters where they are.
template <class T>
class SGD {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    /// Throws std::invalid_argument for a negative or non-finite option or Nesterov without
    /// momentum or with dampening (torch's rules).
    SGD(std::vector<Parameter<T>> parameters, const SGDOptions& options);

    /// One update of every parameter from its current gradient.
    void step();
    /// Sets every parameter's gradient to zero.
    void zero_grad();

    const SGDOptions& options() const noexcept { return options_; }
    /// Changes the learning rate (for a schedule); throws for a negative or non-finite value.
    void set_lr(double lr);
    const std::vector<Parameter<T>>& parameters() const noexcept { return params_; }
    /// The momentum buffer of parameter i (empty before the first step or without momentum).
    const Tensor<T>& momentum_buffer(std::size_t i) const { return buffers_.at(i); }

private:
    std::vector<Parameter<T>> params_;
    SGDOptions options_;
    std::vector<Tensor<T>> buffers_;  // per parameter, its shape once used
};

// ---- definitions ----------------------------------------------------------------------------

namespace detail {
inline void check_hyper(const char* fn, const char* name, double value) {
    if (!(value >= 0.0) || !std::isfinite(value))
        throw_invalid_argument(fn, name, "must be finite and non-negative", std::to_string(value));
}
}  // namespace detail

template <class T>
SGD<T>::SGD(std::vector<Parameter<T>> parameters, const SGDOptions& options)
    : params_(std::move(parameters)), options_(options), buffers_(params_.size()) {
    constexpr const char* fn = "headwise::SGD::SGD";
    detail::check_hyper(fn, "options.lr", options.lr);
    detail::check_hyper(fn, "options.momentum", options.momentum);
    detail::check_hyper(fn, "options.dampening", options.dampening);
    detail::check_hyper(fn, "options.weight_decay", options.weight_decay);
    if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0))
        throw_invalid_argument(fn, "options.nesterov", "needs momentum > 0 and dampening == 0",
                               "momentum " + std::to_string(options.momentum) + ", dampening " +
                                   std::to_string(options.dampening));
}

template <class T>
void SGD<T>::set_lr(double lr) {
    detail::check_hyper("headwise::SGD::set_lr", "lr", lr);
    options_.lr = lr;
}

template <class T>
void SGD<T>::zero_grad() {
    for (Parameter<T>& p : params_) std::fill_n(p.grad.data(), p.grad.numel(), T(0));
}

template <class T>
void SGD<T>::step() {
    const T lr = static_cast<T>(options_.lr), wd = static_cast<T>(options_.weight_decay);
    const T momentum = static_cast<T>(options_.momentum);
    const T keep = static_cast<T>(1.0 - options_.dampening);
    for (std::size_t i = 0; i < params_.size(); ++i) {
        T* p = params_[i].value.data();       // [numel]
        const T* g = params_[i].grad.data();  // [numel]
        const Index n = params_[i].value.numel();
        Tensor<T>& buf = buffers_[i];
        const bool first = buf.numel() != n;
        if (options_.momentum != 0.0 && first) buf = Tensor<T>(params_[i].value.shape());
        for (Index j = 0; j < n; ++j) {
            T d = g[j];
            if (options_.weight_decay != 0.0) d = d + wd * p[j];
            if (options_.momentum != 0.0) {
                T& b = buf.data()[j];
                b = first ? d : b * momentum + keep * d;
                d = options_.nesterov ? d + momentum * b : b;
            }
            p[j] = p[j] - lr * d;
        }
    }
}

}  // namespace headwise
