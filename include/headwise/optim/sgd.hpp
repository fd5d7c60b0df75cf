// SPDX-License-Identifier: MIT
// SGD<T>: torch.optim.SGD (momentum, dampening, Nesterov, weight decay) over module parameters.
#pragma once

#include <algorithm>  // std::fill_n, std::copy_n
#include <cstddef>    // std::size_t
#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../layers/module.hpp"
#include "../tensor.hpp"
#include "detail/optimizer_state.hpp"

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
///
/// state_dict() is torch's optimizer.state_dict() flattened into tensor names (parameter i in
/// the order of parameters()):
///   state.<i>.momentum_buffer      b, the parameter's shape; from the first step on, with
///                                  momentum != 0 (as torch: before it there is no buffer)
///   param_groups.0.lr, .momentum, .dampening, .weight_decay, .nesterov (0 or 1)   rank 0
///   param_groups.0.params          [n]: 0, 1, ..., n - 1 (the parameters' indices, as torch)
/// load_state_dict() restores the momentum buffers and the learning rate and checks the rest
/// (see load_state_dict).
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

    /// Copies of the momentum buffers and the options, under the names in the class comment.
    StateDict<T> state_dict() const;
    /// Strict load of a state_dict() of an SGD over parameters of the same shapes: a missing,
    /// unexpected or mis-shaped entry, momentum buffers for some parameters but not all, or a
    /// hyper-parameter that differs throws std::invalid_argument naming the entry, before
    /// anything changes. The learning rate is restored, as torch does, so that a schedule's
    /// current rate comes back; since the dict holds it as T, an optimiser whose own lr rounds
    /// to the stored value keeps its own (exact) lr. momentum, dampening, weight_decay and
    /// nesterov define the update: they are not taken from the dict (a float copy of a double
    /// option would change the trajectory) but checked against this optimiser's, converted to T.
    void load_state_dict(const StateDict<T>& state);

private:
    std::vector<Parameter<T>> params_;
    SGDOptions options_;
    std::vector<Tensor<T>> buffers_;  // per parameter, its shape once used
    bool has_buffers_ = false;        // a step with momentum has run: buffers_ hold b
};

// ---- definitions ----------------------------------------------------------------------------

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
        const bool first = !has_buffers_;
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
    has_buffers_ = has_buffers_ || options_.momentum != 0.0;
}

template <class T>
StateDict<T> SGD<T>::state_dict() const {
    StateDict<T> sd;
    if (has_buffers_)
        for (std::size_t i = 0; i < params_.size(); ++i)
            sd.emplace("state." + std::to_string(i) + ".momentum_buffer", buffers_[i]);
    const std::string g = "param_groups.0.";
    sd.emplace(g + "lr", detail::scalar_tensor<T>(options_.lr));
    sd.emplace(g + "momentum", detail::scalar_tensor<T>(options_.momentum));
    sd.emplace(g + "dampening", detail::scalar_tensor<T>(options_.dampening));
    sd.emplace(g + "weight_decay", detail::scalar_tensor<T>(options_.weight_decay));
    sd.emplace(g + "nesterov", detail::scalar_tensor<T>(options_.nesterov ? 1.0 : 0.0));
    sd.emplace(g + "params", Tensor<T>::arange(static_cast<Index>(params_.size())));
    return sd;
}

template <class T>
void SGD<T>::load_state_dict(const StateDict<T>& state) {
    const std::string fn = "headwise::SGD::load_state_dict";
    const std::string g = "param_groups.0.";
    const std::size_t n = params_.size();
    std::map<std::string, Shape> expected;
    for (const char* key : {"lr", "momentum", "dampening", "weight_decay", "nesterov"})
        expected.emplace(g + key, Shape{});
    expected.emplace(g + "params", Shape{static_cast<Index>(n)});
    // Buffers exist from the first step with momentum on: for every parameter or for none.
    bool buffers = false;
    for (std::size_t i = 0; i < n && !buffers; ++i)
        buffers = state.count("state." + std::to_string(i) + ".momentum_buffer") > 0;
    if (buffers && options_.momentum == 0.0)
        throw std::invalid_argument(fn +
                                    ": state.<i>.momentum_buffer: unexpected without "
                                    "momentum (this optimiser's momentum is 0)");
    if (buffers)
        for (std::size_t i = 0; i < n; ++i)
            expected.emplace("state." + std::to_string(i) + ".momentum_buffer",
                             params_[i].value.shape());
    detail::check_state_keys<T>(
        fn, state, expected,
        "param_groups.0.{lr, momentum, dampening, weight_decay, "
        "nesterov, params}" +
            std::string(options_.momentum != 0.0 ? " and, after the first step, "
                                                   "state.<i>.momentum_buffer for i < " +
                                                       std::to_string(n)
                                                 : ""));
    detail::check_param_indices(fn, state.at(g + "params"));
    detail::check_hyper_matches(fn, g + "momentum", state.at(g + "momentum"), options_.momentum);
    detail::check_hyper_matches(fn, g + "dampening", state.at(g + "dampening"), options_.dampening);
    detail::check_hyper_matches(fn, g + "weight_decay", state.at(g + "weight_decay"),
                                options_.weight_decay);
    detail::check_hyper_matches(fn, g + "nesterov", state.at(g + "nesterov"),
                                options_.nesterov ? 1.0 : 0.0);
    const double lr = detail::restored_lr(fn, g + "lr", state.at(g + "lr"), options_.lr);

    // Everything checked: assign.
    options_.lr = lr;
    has_buffers_ = buffers;
    for (std::size_t i = 0; i < n; ++i)
        buffers_[i] =
            buffers ? state.at("state." + std::to_string(i) + ".momentum_buffer") : Tensor<T>();
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_SGD_TEMPLATES(C, F, T) C(class, SGD<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_SGD_TEMPLATES);
