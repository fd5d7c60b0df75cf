// SPDX-License-Identifier: MIT
// Which optimisers a learning-rate schedule can drive (optim/lr_scheduler.hpp).
#pragma once

#include <type_traits>  // std::decay_t, std::is_convertible, std::void_t, std::false_type
#include <utility>      // std::declval

#include "../../layers/module.hpp"

namespace headwise::detail {

template <class P>
struct parameter_scalar {};
template <class T>
struct parameter_scalar<Parameter<T>> {
    using type = T;
};

/// Whether O is an optimiser a schedule can drive: options().lr, set_lr(double), parameters().
template <class O, class = void>
struct is_lr_optimizer : std::false_type {};
template <class O>
struct is_lr_optimizer<
    O, std::void_t<decltype(std::declval<O&>().set_lr(0.0)),
                   typename parameter_scalar<typename std::decay_t<
                       decltype(std::declval<const O&>().parameters())>::value_type>::type>>
    : std::is_convertible<decltype(std::declval<const O&>().options().lr), double> {};

}  // namespace headwise::detail
