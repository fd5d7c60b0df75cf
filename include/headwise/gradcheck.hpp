// SPDX-License-Identifier: MIT
// gradcheck: compares a hand-written backward with central finite differences, in double.
#pragma once

#include <algorithm>    // std::max
#include <cmath>        // std::abs, std::isnan
#include <cstddef>      // std::size_t
#include <limits>       // std::numeric_limits
#include <sstream>      // std::ostringstream
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_convertible_v
#include <vector>       // std::vector

#include "compare.hpp"
#include "config.hpp"
#include "error.hpp"
#include "random.hpp"
#include "tensor.hpp"

namespace headwise {

struct GradcheckOptions {
    double eps = 1e-6;        // step h of the central difference (l(x + h) - l(x - h)) / 2h
    double tolerance = 1e-6;  // largest relative error that passes
};

struct GradcheckResult {
    bool ok = false;             // checked > 0 and max_rel_error <= tolerance
    double max_rel_error = 0.0;  // worst |analytic - numeric| / max(|analytic|, |numeric|, floor)
    double max_abs_error = 0.0;  // worst |analytic - numeric|
    std::string where;           // e.g. "input 2 [0, 1, 3]: analytic 0.123, numeric 0.124"
    Index checked = 0;           // number of scalar partials compared
};

/// Checks `backward` against central differences of `f`, for every element of every input.
///
/// `f` is the function under test, any callable `Tensor<double>(const std::vector<Tensor<double>>&
/// inputs)` returning one output tensor (any shape); it must be deterministic. `backward` is its
/// backward, any callable `std::vector<Tensor<double>>(const std::vector<Tensor<double>>& inputs,
/// const Tensor<double>& grad_output)` returning dL/d(input i) for every input, each with its
/// input's shape; an empty tensor (numel() == 0) marks an input as not differentiated.
///
/// Draws an upstream gradient G ~ N(0, 1) with the shape of f(inputs) from `rng` and defines the
/// scalar loss l(x) = sum(f(x) ⊙ G), whose gradient backward(inputs, G) claims to be. Each
/// partial is estimated as (l(x + eps e_j) - l(x - eps e_j)) / (2 eps), computed as
/// sum((f(x + eps e_j) - f(x - eps e_j)) ⊙ G) / (2 eps) so the two nearly equal losses are never
/// subtracted (less cancellation). Cost: two evaluations of f per checked element.
///
/// Relative error of a partial: |a - n| / max(|a|, |n|, floor), where the floor of input i is
/// 1e-3 times the largest |numeric| partial of that input. A near-zero partial, whose finite
/// difference is mostly rounding and truncation error (O(eps^2)), is thereby judged against the
/// scale of the input's whole gradient instead of against itself, while a wrong one still stands
/// out; an error that is exactly 0 counts as 0 (never 0 / 0). NaN on either side fails.
/// `where` describes the partial with the largest relative error. `checked` counts the partials
/// compared; a check that compared none (every gradient asked for is empty, or so is every input)
/// proves nothing and fails, `where` saying so. Tests assert `checked` as well as `ok`, so that a
/// backward that returns fewer gradients than it should does not pass unnoticed.
///
/// Throws std::invalid_argument when eps or tolerance is not positive, when backward returns
/// the wrong number of tensors, and shape_error when one of them (not empty) has a shape other
/// than its input's, or when f changes its output shape under a perturbation.
template <class F, class Backward>
GradcheckResult gradcheck(const F& f, const Backward& backward,
                          const std::vector<Tensor<double>>& inputs, Generator& rng,
                          GradcheckOptions options = {});

/// The same, checking only the inputs whose indices are listed in `check_inputs` (the others are
/// held fixed; backward's tensors for them are ignored).
template <class F, class Backward>
GradcheckResult gradcheck(const F& f, const Backward& backward,
                          const std::vector<Tensor<double>>& inputs,
                          const std::vector<Index>& check_inputs, Generator& rng,
                          GradcheckOptions options = {});

// ---- definitions ---------------------------------------------------------------------------

template <class F, class Backward>
GradcheckResult gradcheck(const F& f, const Backward& backward,
                          const std::vector<Tensor<double>>& inputs, Generator& rng,
                          GradcheckOptions options) {
    std::vector<Index> all(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) all[i] = static_cast<Index>(i);
    return gradcheck(f, backward, inputs, all, rng, options);
}

template <class F, class Backward>
GradcheckResult gradcheck(const F& f, const Backward& backward,
                          const std::vector<Tensor<double>>& inputs,
                          const std::vector<Index>& check_inputs, Generator& rng,
                          GradcheckOptions options) {
    constexpr const char* fn = "headwise::gradcheck";
    if (!(options.eps > 0.0))
        throw_invalid_argument(fn, "options.eps", "must be positive", std::to_string(options.eps));
    if (!(options.tolerance > 0.0))
        throw_invalid_argument(fn, "options.tolerance", "must be positive",
                               std::to_string(options.tolerance));
    const Index n_inputs = static_cast<Index>(inputs.size());
    for (const Index i : check_inputs)
        if (i < 0 || i >= n_inputs)
            throw_invalid_argument(
                fn, "check_inputs",
                "must hold input indices in [0, " + std::to_string(n_inputs) + ")",
                std::to_string(i));

    const Tensor<double> y = f(inputs);                              // [output shape]
    const Tensor<double> G = Tensor<double>::randn(y.shape(), rng);  // [output shape]
    const std::vector<Tensor<double>> analytic = backward(inputs, G);
    static_assert(std::is_convertible_v<decltype(f(inputs)), Tensor<double>>,
                  "headwise::gradcheck: f(inputs) must return a Tensor<double>");
    if (analytic.size() != inputs.size())
        throw_invalid_argument(
            fn, "backward", "must return one tensor per input (" + std::to_string(n_inputs) + ")",
            std::to_string(analytic.size()) + " tensors");

    // f at perturbed inputs, its output shape checked each time (G only fits that shape).
    const auto output_of = [&](const std::vector<Tensor<double>>& x) {
        Tensor<double> out = f(x);
        detail::check_shape(fn, "f(perturbed inputs)", out.shape(), y.shape());
        return out;
    };

    GradcheckResult result;
    std::vector<Tensor<double>> x = inputs;  // perturbed in place, one element at a time
    std::vector<double> numeric;
    for (const Index i : check_inputs) {
        const std::size_t iu = static_cast<std::size_t>(i);
        const Tensor<double>& grad = analytic[iu];
        if (grad.numel() == 0) continue;  // not differentiated
        detail::check_shape(fn, ("backward result " + std::to_string(i)).c_str(), grad.shape(),
                            inputs[iu].shape());

        // Pass 1: every numeric partial of input i (the floor needs their largest magnitude).
        Tensor<double>& xi = x[iu];
        numeric.assign(static_cast<std::size_t>(xi.numel()), 0.0);
        double scale = 0.0;
        for (Index j = 0; j < xi.numel(); ++j) {
            const double original = xi.data()[j];
            xi.data()[j] = original + options.eps;
            const Tensor<double> plus = output_of(x);
            xi.data()[j] = original - options.eps;
            const Tensor<double> minus = output_of(x);
            xi.data()[j] = original;  // restored exactly: the saved value, not x + eps - eps

            double dl = 0.0;
            for (Index k = 0; k < G.numel(); ++k)
                dl += (plus.data()[k] - minus.data()[k]) * G.data()[k];
            const double partial = dl / (2.0 * options.eps);
            numeric[static_cast<std::size_t>(j)] = partial;
            scale = std::max(scale, std::abs(partial));
        }

        // Pass 2: compare with the analytic partials.
        const double floor = 1e-3 * scale;
        for (Index j = 0; j < xi.numel(); ++j) {
            const double a = grad.data()[j];
            const double n = numeric[static_cast<std::size_t>(j)];
            double abs_error = std::abs(a - n);
            const double denominator = std::max({std::abs(a), std::abs(n), floor});
            double rel_error = abs_error == 0.0 ? 0.0 : abs_error / denominator;
            if (std::isnan(abs_error) || std::isnan(rel_error)) {
                // A NaN on either side never passes (every comparison with NaN is false).
                abs_error = std::numeric_limits<double>::infinity();
                rel_error = abs_error;
            }
            ++result.checked;
            result.max_abs_error = std::max(result.max_abs_error, abs_error);
            if (result.where.empty() || rel_error > result.max_rel_error) {
                result.max_rel_error = rel_error;
                std::ostringstream os;
                os.precision(10);
                os << "input " << i << " " << detail::index_string(xi.shape(), j) << ": analytic "
                   << a << ", numeric " << n;
                result.where = os.str();
            }
        }
    }
    if (result.checked == 0) {
        result.where = "nothing checked: every input asked for has an empty gradient or no element";
        return result;  // ok stays false
    }
    result.ok = result.max_rel_error <= options.tolerance;
    return result;
}

}  // namespace headwise
