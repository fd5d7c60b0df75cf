// SPDX-License-Identifier: MIT
// The checks and conversions the optimisers' state dicts share: hyper-parameters, exact decimals
// for messages, strict key and shape checks, the stored learning rate and parameter indices.
#pragma once

#include <cmath>      // std::isfinite
#include <cstdlib>    // std::strtod
#include <limits>     // std::numeric_limits
#include <map>        // std::map
#include <sstream>    // std::ostringstream
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../layers/module.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"

namespace headwise::detail {

/// Throws std::invalid_argument unless the hyper-parameter `value` is finite and non-negative.
inline void check_hyper(const char* fn, const char* name, double value) {
    if (!(value >= 0.0) || !std::isfinite(value))
        throw_invalid_argument(fn, name, "must be finite and non-negative", std::to_string(value));
}

/// Shortest decimal that reads back as the same R ("0.001", not "0.001000" or the float's
/// "0.0010000000474974513").
template <class R = double>
std::string exact_decimal(R value) {
    constexpr int max_digits = std::numeric_limits<R>::max_digits10;
    for (int precision = 1; precision < max_digits; ++precision) {
        std::ostringstream shorter;
        shorter.precision(precision);
        shorter << value;
        if (static_cast<R>(std::strtod(shorter.str().c_str(), nullptr)) == value)
            return shorter.str();
    }
    std::ostringstream out;
    out.precision(max_digits);
    out << value;
    return out.str();
}

/// The strict-load checks shared by the optimisers. `expected` maps every key the dict must hold
/// to its shape; every problem throws std::invalid_argument naming `fn` and the key.
template <class T>
void check_state_keys(const std::string& fn, const StateDict<T>& state,
                      const std::map<std::string, Shape>& expected, const std::string& layout) {
    for (const auto& entry : expected) {
        const auto it = state.find(entry.first);
        if (it == state.end())
            throw std::invalid_argument(fn + ": " + entry.first +
                                        ": missing from the state dict, expected shape " +
                                        entry.second.str());
        check_shape(fn.c_str(), entry.first.c_str(), it->second.shape(), entry.second);
    }
    for (const auto& entry : state)
        if (!expected.count(entry.first))
            throw std::invalid_argument(fn + ": " + entry.first +
                                        ": unexpected key in the state dict (shape " +
                                        entry.second.shape().str() + "); expected " + layout);
}

/// A rank-0 tensor holding `value`.
template <class T>
Tensor<T> scalar_tensor(double value) {
    Tensor<T> t(Shape{});
    t.data()[0] = static_cast<T>(value);
    return t;
}

/// Throws unless the stored hyper-parameter equals this optimiser's `option` converted to T.
template <class T>
void check_hyper_matches(const std::string& fn, const std::string& key, const Tensor<T>& stored,
                         double option, Index i = 0) {
    const T want = static_cast<T>(option), got = stored.data()[i];
    if (!(got == want))
        throw_invalid_argument(fn, key,
                               "must equal this optimiser's option " + exact_decimal(option),
                               exact_decimal(got));
}

/// The learning rate load_state_dict sets: `current` when the stored value is it rounded to T,
/// else the stored value, which must be a valid learning rate.
template <class T>
double restored_lr(const std::string& fn, const std::string& key, const Tensor<T>& stored,
                   double current) {
    const T got = stored.data()[0];
    if (got == static_cast<T>(current)) return current;
    const double lr = static_cast<double>(got);
    if (!(lr >= 0.0) || !std::isfinite(lr))
        throw_invalid_argument(fn, key, "must be finite and non-negative", exact_decimal(got));
    return lr;
}

/// "param_groups.0.params" as torch's: the parameters' indices.
template <class T>
void check_param_indices(const std::string& fn, const Tensor<T>& stored) {
    for (Index i = 0; i < stored.numel(); ++i)
        if (!(stored.data()[i] == static_cast<T>(i)))
            throw_invalid_argument(
                fn, "param_groups.0.params",
                "must hold 0, 1, ..., " + std::to_string(stored.numel() - 1),
                exact_decimal(stored.data()[i]) + " at index " + std::to_string(i));
}

}  // namespace headwise::detail
