// SPDX-License-Identifier: MIT
// Adam<T> and AdamW<T>: torch.optim.Adam / AdamW (bias correction, eps, weight decay, AMSGrad).
#pragma once

#include <algorithm>    // std::max, std::fill_n
#include <cmath>        // std::pow, std::sqrt, std::isfinite, std::floor
#include <cstddef>      // std::size_t
#include <limits>       // std::numeric_limits
#include <map>          // std::map
#include <stdexcept>    // std::invalid_argument, std::overflow_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <utility>      // std::move
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../layers/module.hpp"
#include "../tensor.hpp"
#include "detail/optimizer_state.hpp"

namespace headwise {

/// The arguments of torch.optim.Adam and AdamW (betas as beta1, beta2). AdamW's default
/// weight_decay is 1e-2 (AdamW sets it in its constructor when left negative).
struct AdamOptions {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = -1.0;  // < 0: the optimiser's default (Adam 0, AdamW 1e-2)
    bool amsgrad = false;
};

/// Per-parameter state, as torch's optimizer.state[p].
template <class T>
struct AdamState {
    Index step = 0;
    Tensor<T> exp_avg;         // m, the parameter's shape
    Tensor<T> exp_avg_sq;      // v
    Tensor<T> max_exp_avg_sq;  // max over steps of v (AMSGrad only; else empty)
};

/// What Adam and AdamW share (construct one of those; the constructor is theirs): Adam (Kingma
/// and Ba 2015, Algorithm 1) as torch.optim's single-tensor implementation (1.13),
/// step t of parameter p with gradient g:
///   p = p (1 - lr wd)                                   (decoupled: AdamW, Loshchilov and Hutter)
///   g = g + wd p                                        (coupled: Adam)
///   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g²
///   v̂ = max(v̂, v) (AMSGrad) or v
///   p = p - lr / (1 - beta1^t) m / (sqrt(v̂) / sqrt(1 - beta2^t) + eps)
///
/// state_dict() is torch's optimizer.state_dict() flattened into tensor names (parameter i in
/// the order of parameters()):
///   state.<i>.step                 t, rank 0 (a float tensor, as torch's)
///   state.<i>.exp_avg              m, the parameter's shape
///   state.<i>.exp_avg_sq           v
///   state.<i>.max_exp_avg_sq       v̂ (with amsgrad only)
///   param_groups.0.lr, .eps, .weight_decay, .amsgrad (0 or 1)                       rank 0
///   param_groups.0.betas           [2]: beta1, beta2
///   param_groups.0.params          [n]: 0, 1, ..., n - 1 (the parameters' indices, as torch)
/// The state entries are there from construction on (zero moments and step 0 before the first
/// step, which is what torch's lazily created state starts from). Steps are exact integers up
/// to 2^24 in float and 2^53 in double; state_dict() throws std::overflow_error past that.
template <class T>
class AdamBase {
public:
    void step();
    void zero_grad() {
        for (Parameter<T>& p : params_) std::fill_n(p.grad.data(), p.grad.numel(), T(0));
    }
    const AdamOptions& options() const noexcept { return options_; }
    /// Changes the learning rate (for a schedule); throws for a negative or non-finite value.
    void set_lr(double lr) {
        detail::check_hyper(decoupled_ ? "headwise::AdamW::set_lr" : "headwise::Adam::set_lr", "lr",
                            lr);
        options_.lr = lr;
    }
    const std::vector<Parameter<T>>& parameters() const noexcept { return params_; }
    const AdamState<T>& state(std::size_t i) const { return state_.at(i); }

    /// Copies of the moments, steps and options, under the names in the class comment.
    StateDict<T> state_dict() const;
    /// Strict load of a state_dict() of an optimiser over parameters of the same shapes: a
    /// missing, unexpected or mis-shaped entry, a step that is no non-negative integer, or a
    /// hyper-parameter that differs throws std::invalid_argument naming the entry, before
    /// anything changes. Moments and steps are restored, and the learning rate, as torch does,
    /// so that a schedule's current rate comes back; since the dict holds it as T, an optimiser
    /// whose own lr rounds to the stored value keeps its own (exact) lr. betas, eps,
    /// weight_decay and amsgrad define the update: they are not taken from the dict (a float
    /// copy of a double option would change the trajectory) but checked against this
    /// optimiser's, converted to T.
    void load_state_dict(const StateDict<T>& state);

protected:
    AdamBase(const char* fn, std::vector<Parameter<T>> parameters, AdamOptions options,
             bool decoupled);

private:
    const char* name() const noexcept { return decoupled_ ? "headwise::AdamW" : "headwise::Adam"; }
    // Step counts T holds exactly, every smaller one too: 2^24 (float), 2^53 (double).
    static constexpr Index kMaxStep = Index{1} << std::numeric_limits<T>::digits;

    std::vector<Parameter<T>> params_;
    AdamOptions options_;
    bool decoupled_;
    std::vector<AdamState<T>> state_;
};

/// torch.optim.Adam: weight decay added to the gradient (an L2 penalty).
template <class T>
class Adam : public AdamBase<T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    /// Throws std::invalid_argument for a negative or non-finite lr, eps or weight_decay, or a
    /// beta outside [0, 1).
    Adam(std::vector<Parameter<T>> parameters, const AdamOptions& options = {})
        : AdamBase<T>("headwise::Adam::Adam", std::move(parameters), options, false) {}
};

/// torch.optim.AdamW: decoupled weight decay, p *= 1 - lr wd before the Adam step.
template <class T>
class AdamW : public AdamBase<T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    AdamW(std::vector<Parameter<T>> parameters, const AdamOptions& options = {})
        : AdamBase<T>("headwise::AdamW::AdamW", std::move(parameters), options, true) {}
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
AdamBase<T>::AdamBase(const char* fn, std::vector<Parameter<T>> parameters, AdamOptions options,
                      bool decoupled)
    : params_(std::move(parameters)), options_(options), decoupled_(decoupled) {
    if (options_.weight_decay < 0.0) options_.weight_decay = decoupled ? 1e-2 : 0.0;
    detail::check_hyper(fn, "options.lr", options_.lr);
    detail::check_hyper(fn, "options.eps", options_.eps);
    detail::check_hyper(fn, "options.weight_decay", options_.weight_decay);
    if (!(options_.beta1 >= 0.0 && options_.beta1 < 1.0))
        throw_invalid_argument(fn, "options.beta1", "must be in [0, 1)",
                               std::to_string(options_.beta1));
    if (!(options_.beta2 >= 0.0 && options_.beta2 < 1.0))
        throw_invalid_argument(fn, "options.beta2", "must be in [0, 1)",
                               std::to_string(options_.beta2));
    state_.resize(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const Shape& s = params_[i].value.shape();
        state_[i].exp_avg = Tensor<T>(s);
        state_[i].exp_avg_sq = Tensor<T>(s);
        if (options_.amsgrad) state_[i].max_exp_avg_sq = Tensor<T>(s);
    }
}

template <class T>
void AdamBase<T>::step() {
    const AdamOptions& o = options_;
    const T beta1 = static_cast<T>(o.beta1), beta2 = static_cast<T>(o.beta2);
    const T one_minus_beta1 = static_cast<T>(1.0 - o.beta1);
    const T one_minus_beta2 = static_cast<T>(1.0 - o.beta2);
    const T wd = static_cast<T>(o.weight_decay), eps = static_cast<T>(o.eps);
    const T decay = static_cast<T>(1.0 - o.lr * o.weight_decay);
    for (std::size_t i = 0; i < params_.size(); ++i) {
        AdamState<T>& s = state_[i];
        const Index t = ++s.step;
        // Scalars in double as torch forms them (Python floats), then rounded to T.
        const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
        const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
        const T step_size = static_cast<T>(o.lr / bias_correction1);
        const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
        T* p = params_[i].value.data();       // [numel]
        const T* g = params_[i].grad.data();  // [numel]
        T* m = s.exp_avg.data();              // [numel]
        T* v = s.exp_avg_sq.data();           // [numel]
        T* vmax = s.max_exp_avg_sq.data();    // [numel] or null
        const Index n = params_[i].value.numel();
        for (Index j = 0; j < n; ++j) {
            T grad = g[j];
            if (o.weight_decay != 0.0) {
                if (decoupled_)
                    p[j] = p[j] * decay;
                else
                    grad = grad + wd * p[j];
            }
            m[j] = m[j] * beta1 + one_minus_beta1 * grad;
            v[j] = v[j] * beta2 + one_minus_beta2 * grad * grad;
            T second = v[j];
            if (o.amsgrad) second = vmax[j] = std::max(vmax[j], v[j]);
            const T denom = std::sqrt(second) / bias_correction2_sqrt + eps;
            p[j] = p[j] - step_size * (m[j] / denom);
        }
    }
}

template <class T>
StateDict<T> AdamBase<T>::state_dict() const {
    StateDict<T> sd;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const std::string prefix = "state." + std::to_string(i) + ".";
        const AdamState<T>& s = state_[i];
        if (s.step > kMaxStep)
            throw std::overflow_error(std::string(name()) + "::state_dict: " + prefix + "step: " +
                                      std::to_string(s.step) + " is past the largest step count " +
                                      (std::is_same_v<T, float> ? "float" : "double") +
                                      " holds exactly, " + std::to_string(kMaxStep));
        sd.emplace(prefix + "step", detail::scalar_tensor<T>(static_cast<double>(s.step)));
        sd.emplace(prefix + "exp_avg", s.exp_avg);
        sd.emplace(prefix + "exp_avg_sq", s.exp_avg_sq);
        if (options_.amsgrad) sd.emplace(prefix + "max_exp_avg_sq", s.max_exp_avg_sq);
    }
    const std::string g = "param_groups.0.";
    sd.emplace(g + "lr", detail::scalar_tensor<T>(options_.lr));
    sd.emplace(g + "betas", Tensor<T>(Shape{2}, {static_cast<T>(options_.beta1),
                                                 static_cast<T>(options_.beta2)}));
    sd.emplace(g + "eps", detail::scalar_tensor<T>(options_.eps));
    sd.emplace(g + "weight_decay", detail::scalar_tensor<T>(options_.weight_decay));
    sd.emplace(g + "amsgrad", detail::scalar_tensor<T>(options_.amsgrad ? 1.0 : 0.0));
    sd.emplace(g + "params", Tensor<T>::arange(static_cast<Index>(params_.size())));
    return sd;
}

template <class T>
void AdamBase<T>::load_state_dict(const StateDict<T>& state) {
    const std::string fn = std::string(name()) + "::load_state_dict";
    const std::string g = "param_groups.0.";
    const std::size_t n = params_.size();
    std::map<std::string, Shape> expected;
    for (std::size_t i = 0; i < n; ++i) {
        const std::string prefix = "state." + std::to_string(i) + ".";
        const Shape& shape = params_[i].value.shape();
        expected.emplace(prefix + "step", Shape{});
        expected.emplace(prefix + "exp_avg", shape);
        expected.emplace(prefix + "exp_avg_sq", shape);
        if (options_.amsgrad) expected.emplace(prefix + "max_exp_avg_sq", shape);
    }
    for (const char* key : {"lr", "eps", "weight_decay", "amsgrad"})
        expected.emplace(g + key, Shape{});
    expected.emplace(g + "betas", Shape{2});
    expected.emplace(g + "params", Shape{static_cast<Index>(n)});
    detail::check_state_keys<T>(
        fn, state, expected,
        "state.<i>.{step, exp_avg, exp_avg_sq" +
            std::string(options_.amsgrad ? ", max_exp_avg_sq" : "") + "} for i < " +
            std::to_string(n) + ", param_groups.0.{lr, betas, eps, weight_decay, amsgrad, params}");
    detail::check_param_indices(fn, state.at(g + "params"));
    detail::check_hyper_matches(fn, g + "betas[0]", state.at(g + "betas"), options_.beta1, 0);
    detail::check_hyper_matches(fn, g + "betas[1]", state.at(g + "betas"), options_.beta2, 1);
    detail::check_hyper_matches(fn, g + "eps", state.at(g + "eps"), options_.eps);
    detail::check_hyper_matches(fn, g + "weight_decay", state.at(g + "weight_decay"),
                                options_.weight_decay);
    detail::check_hyper_matches(fn, g + "amsgrad", state.at(g + "amsgrad"),
                                options_.amsgrad ? 1.0 : 0.0);
    const double lr = detail::restored_lr(fn, g + "lr", state.at(g + "lr"), options_.lr);
    std::vector<Index> steps(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::string key = "state." + std::to_string(i) + ".step";
        const T t = state.at(key).data()[0];
        if (!(t >= T(0) && t <= static_cast<T>(kMaxStep) && std::floor(t) == t))
            throw_invalid_argument(fn, key,
                                   "must be an integer in [0, " + std::to_string(kMaxStep) + "]",
                                   detail::exact_decimal(t));
        steps[i] = static_cast<Index>(t);
    }

    // Everything checked: assign.
    options_.lr = lr;
    for (std::size_t i = 0; i < n; ++i) {
        const std::string prefix = "state." + std::to_string(i) + ".";
        AdamState<T>& s = state_[i];
        s.step = steps[i];
        s.exp_avg = state.at(prefix + "exp_avg");
        s.exp_avg_sq = state.at(prefix + "exp_avg_sq");
        if (options_.amsgrad) s.max_exp_avg_sq = state.at(prefix + "max_exp_avg_sq");
    }
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_ADAM_TEMPLATES(C, F, T) \
    C(struct, AdamState<T>)                     \
    C(class, AdamBase<T>)                       \
    C(class, Adam<T>)                           \
    C(class, AdamW<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_ADAM_TEMPLATES);
