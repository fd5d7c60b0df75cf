// SPDX-License-Identifier: MIT
// The strict state-dict check modules run before load_state_dict modifies anything.
#pragma once

#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise::detail {

/// Name and shape of one parameter a module expects in its state dict, in the module's order.
using ParameterShapes = std::vector<std::pair<std::string, Shape>>;

/// Throws unless `state` holds exactly the entries of `expected` with exactly their shapes.
/// The first problem found is reported, expected entries in their order first:
///   "<function>: bias: missing from the state dict, expected shape [4]"      (invalid_argument)
///   "<function>: weight: expected shape [4, 3], got [3, 4]"                  (shape_error)
///   "<function>: foo: unexpected key in the state dict (shape [2]); expected keys: weight, bias"
template <class T>
void check_state_dict(const char* function, const std::map<std::string, Tensor<T>>& state,
                      const ParameterShapes& expected) {
    for (const auto& [name, shape] : expected) {
        const auto it = state.find(name);
        if (it == state.end())
            throw std::invalid_argument(std::string(function) + ": " + name +
                                        ": missing from the state dict, expected shape " +
                                        shape.str());
        check_shape(function, name.c_str(), it->second.shape(), shape);
    }
    if (state.size() == expected.size()) return;  // every expected key present, none extra
    for (const auto& entry : state) {
        bool known = false;
        for (const auto& parameter : expected) known = known || parameter.first == entry.first;
        if (known) continue;
        std::string keys;
        for (const auto& parameter : expected) keys += (keys.empty() ? "" : ", ") + parameter.first;
        throw std::invalid_argument(std::string(function) + ": " + entry.first +
                                    ": unexpected key in the state dict (shape " +
                                    entry.second.shape().str() + "); expected keys: " + keys);
    }
}

}  // namespace headwise::detail
