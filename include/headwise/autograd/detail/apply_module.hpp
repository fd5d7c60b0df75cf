// SPDX-License-Identifier: MIT
// The one adapter behind autograd::apply: runs a module's forward and records its backward.
#pragma once

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <memory>       // std::shared_ptr, std::make_shared
#include <tuple>        // std::tuple, std::get, std::tuple_size
#include <type_traits>  // std::conditional_t, std::decay_t, std::is_same_v, std::void_t
#include <utility>      // std::forward, std::move, std::index_sequence

#include "../../tensor.hpp"
#include "../module_traits.hpp"
#include "../tape.hpp"
#include "recorded_call.hpp"

namespace headwise::autograd::detail {

/// How many of the leading types of Tuple are Var<T> (the tensor arguments of an apply call),
/// and the others (the forward's extra arguments) as a tuple.
template <class T, class Tuple>
struct split_vars;
template <class T>
struct split_vars<T, std::tuple<>> {
    static constexpr std::size_t vars = 0;
    using rest = std::tuple<>;
};
template <class T, class A, class... As>
struct split_vars<T, std::tuple<A, As...>> {
    static constexpr bool is_var = std::is_same_v<std::decay_t<A>, Var<T>>;
    static constexpr std::size_t vars = is_var ? 1 + split_vars<T, std::tuple<As...>>::vars : 0;
    using rest = std::conditional_t<is_var, typename split_vars<T, std::tuple<As...>>::rest,
                                    std::tuple<A, As...>>;
};

template <class M, std::size_t N, class Rest>
struct traits_from;
template <class M, std::size_t N, class... Extra>
struct traits_from<M, N, std::tuple<Extra...>> {
    using type = module_traits<M, N, Extra...>;
};

/// module_traits of apply(m, x, args...): the leading Vars of args count as tensor inputs.
template <class M, class... Args>
using traits_for_t = typename traits_from<
    M, split_vars<typename M::value_type, std::tuple<Args...>>::vars + 1,
    typename split_vars<typename M::value_type, std::tuple<Args...>>::rest>::type;

/// "headwise::autograd::apply(Linear)" from kName "headwise::Linear", built once per type in a
/// static buffer (no allocation: a no-grad call costs only its result's holder).
template <class M>
const char* apply_name() {
    struct Name {
        char text[160] = {};
    };
    static const Name name = [] {
        Name n;
        const char* k = module_name<M>();
        const char* last = k;  // after the last "::"
        for (const char* p = k; *p != '\0'; ++p)
            if (p[0] == ':' && p[1] == ':') last = p + 2;
        std::size_t at = 0;
        const auto put = [&](const char* s) {
            for (; *s != '\0' && at + 1 < sizeof n.text; ++s) n.text[at++] = *s;
        };
        put("headwise::autograd::apply(");
        put(last);
        put(")");
        return n;
    }();
    return name.text;
}

/// Whether m has parameters whose gradients a recording must reach.
template <class M>
bool has_parameters(const M& m) {
    if constexpr (has_parameter_count<M>::value)
        return m.parameter_count() > 0;
    else
        return true;
}

/// m.forward with the K tensor inputs (x[0] K times when one Var stands for all) and `extra`.
template <class M, class T, std::size_t NV, std::size_t... I, class... Extra>
auto call_forward(M& m, const std::array<Var<T>, NV>& x, std::index_sequence<I...>,
                  Extra&&... extra) {
    return m.forward(x[NV == 1 ? 0 : I].value()..., std::forward<Extra>(extra)...);
}

/// Hands a gradients struct's fields to the Vars: one each, or all summed into x[0].
template <class T, std::size_t NV, class Fields, std::size_t... I>
void accumulate_fields(Tape<T>& tape, const std::array<Var<T>, NV>& x, Fields fields,
                       std::index_sequence<I...>) {
    constexpr std::size_t K = sizeof...(I);
    if constexpr (NV == K) {
        (tape.accumulate(x[I], std::move(std::get<I>(fields))), ...);
    } else {
        // One Var passed as every input: x0 + (x1 + ... + x(K-1)), the sum self-attention has
        // always formed (query + (key + value)); nothing to sum when x is data.
        if (!x[0].recorded()) return;
        Tensor<T>& first = std::get<0>(fields);
        if constexpr (K > 1) {
            Tensor<T> rest = std::move(std::get<1>(fields));
            ((I >= 2 ? (void)(rest.matrix() += std::get<I>(fields).matrix()) : (void)0), ...);
            first.matrix() += rest.matrix();
        }
        tape.accumulate(x[0], std::move(first));
    }
}

/// The adapter: checks the Vars, runs m's forward, and on a recording tape records the call
/// of m's backward that its convention (Traits) names. `names` names the NV Vars.
template <class Traits, class M, class T, std::size_t NV, class... Extra>
Var<T> apply_module(const char* fn, M& m, const std::array<Var<T>, NV>& x, const char* const* names,
                    Extra&&... extra) {
    constexpr BackwardConvention convention = Traits::convention;
    constexpr std::size_t K = Traits::inputs;
    static_assert(convention != BackwardConvention::none, "apply: the module fits no convention");
    static_assert(NV == K || NV == 1, "apply: one Var, or one per input of the forward");
    Tape<T>& tape = Tape<T>::of(fn, names[0], x[0]);
    std::array<const Var<T>*, NV> inputs;
    for (std::size_t i = 0; i < NV; ++i) inputs[i] = &x[i];
    bool rec = tape.begin_call(fn, inputs.data(), names, NV, false);
    // Asked only when nothing else decides: a no-grad call costs no parameter walk.
    if (!rec && tape.recording()) rec = has_parameters(m);
    if constexpr (Traits::saves_activations) check_training(fn, m, rec);

    if constexpr (convention == BackwardConvention::on_input) {
        auto y = std::make_shared<Tensor<T>>(m.forward(x[0].value()));
        TensorView<const T> yv = *y;
        if (!rec) return tape.constant(std::move(y), yv);
        const Var<T> in = x[0];
        // The input's value stays alive through the Var the closure keeps.
        return tape.record(std::move(y), yv, [&tape, &m, in](TensorView<const T> dy) {
            tape.accumulate(in, m.backward(in.value(), dy));
        });
    } else {
        using R = typename Traits::Record;
        auto f = std::make_shared<R>(
            call_forward(m, x, std::make_index_sequence<K>{}, std::forward<Extra>(extra)...));
        TensorView<const T> yv = f->output;
        if (!rec) {
            // A training-mode forward's activations: not needed.
            if constexpr (Traits::saves_activations) f->saved.reset();
            return tape.constant(std::move(f), yv);
        }
        // The record is kept whole (backward checks dy against its output), the Var viewing it.
        std::shared_ptr<const R> saved = f;
        if constexpr (convention == BackwardConvention::record) {
            const Var<T> in = x[0];
            return tape.record(std::move(f), yv, [&tape, &m, in, saved](TensorView<const T> dy) {
                tape.accumulate(in, m.backward(*saved, dy));
            });
        } else {
            return tape.record(std::move(f), yv, [&tape, &m, x, saved](TensorView<const T> dy) {
                auto g = m.backward(*saved, dy);
                using G = decltype(g);
                accumulate_fields(tape, x, gradient_fields<G>::tie(g),
                                  std::make_index_sequence<K>{});
            });
        }
    }
}

/// apply(m, x, args...) split into its Vars (indices V...) and extra arguments (E...).
template <class Traits, std::size_t NV, class M, class Tuple, std::size_t... V, std::size_t... E>
Var<typename M::value_type> apply_split(const char* fn, M& m, Tuple&& all,
                                        std::index_sequence<V...>, std::index_sequence<E...>) {
    using T = typename M::value_type;
    const std::array<Var<T>, NV> x{std::get<V>(all)...};
    static const char* const kOne[] = {"x"};
    const char* const* names = kOne;
    if constexpr (NV > 1) {
        using G = std::decay_t<decltype(std::declval<M&>().backward(
            std::declval<const typename Traits::Record&>(), std::declval<TensorView<const T>>()))>;
        names = gradient_fields<G>::names;
    }
    return apply_module<Traits>(
        fn, m, x, names,
        std::forward<std::tuple_element_t<NV + E, std::decay_t<Tuple>>>(std::get<NV + E>(all))...);
}

}  // namespace headwise::autograd::detail
