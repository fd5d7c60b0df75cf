// SPDX-License-Identifier: MIT
// Sequential and Residual: modules made of modules, declared once and run on a Tape.
#pragma once

#include <cstddef>      // std::size_t
#include <string>       // std::to_string
#include <tuple>        // std::tuple, std::get, std::tuple_element_t
#include <type_traits>  // std::remove_const_t
#include <utility>      // std::move, std::index_sequence

#include "../layers/module.hpp"
#include "functions.hpp"
#include "tape.hpp"

namespace headwise::autograd {

/// Layers applied one after the other (torch.nn.Sequential): apply(seq, x) records
/// apply(layer_0, x), then apply(layer_1, ...) and so on, so any module that apply() takes on a
/// Var may be a layer (Residual and Sequential too). Parameters are the layers' under
/// "0.", "1.", ... (torch's names); train()/eval(), zero_grad(), state_dict() cover them all,
/// with no visitor written by hand:
///
///   Sequential mlp{Linear<float>(8, 32, true, rng), GELU<float>(),
///                  Linear<float>(32, 8, true, rng)};   // "0.weight", "0.bias", "2.weight", ...
///   Var<float> y = apply(mlp, x);
///
/// Braces, not parentheses, when several layers draw from one generator: the elements of a
/// braced list are evaluated left to right, the arguments of a call in an unspecified order
/// (g++ goes right to left), so only braces give the same weights with every compiler.
template <class... Layers>
class Sequential
    : public Module<Sequential<Layers...>,
                    typename std::tuple_element_t<0, std::tuple<Layers...>>::value_type> {
public:
    using value_type = typename std::tuple_element_t<0, std::tuple<Layers...>>::value_type;
    static constexpr const char* kName = "headwise::autograd::Sequential";
    static constexpr std::size_t size = sizeof...(Layers);

    explicit Sequential(Layers... layers) : layers_(std::move(layers)...) {}

    /// Layer I.
    template <std::size_t I>
    auto& get() noexcept {
        return std::get<I>(layers_);
    }
    template <std::size_t I>
    const auto& get() const noexcept {
        return std::get<I>(layers_);
    }

    /// f(layer) for each layer, in order.
    template <class F>
    void for_each_layer(F&& f) {
        for_each(*this, [&](auto& layer, std::size_t) { f(layer); });
    }

    /// Layer i under "i." (torch's names), in order (the module contract).
    template <class D>
    void declare(D& d) {
        for_each(*this, [&](auto& layer, std::size_t i) { d.child(std::to_string(i), layer); });
    }

private:
    template <class Self, class F>
    static void for_each(Self& self, F&& f) {
        for_each(self, f, std::index_sequence_for<Layers...>{});
    }
    template <class Self, class F, std::size_t... I>
    static void for_each(Self& self, F& f, std::index_sequence<I...>) {
        (f(std::get<I>(self.layers_), I), ...);
    }

    std::tuple<Layers...> layers_;
};

/// x + inner(x): a residual connection around one module (He et al. 2016). Its parameters are
/// the inner module's under the inner module's own names (no prefix), so a wrapped layer's
/// state dict reads as it would unwrapped.
template <class Inner>
class Residual : public Module<Residual<Inner>, typename Inner::value_type> {
public:
    using value_type = typename Inner::value_type;
    static constexpr const char* kName = "headwise::autograd::Residual";

    explicit Residual(Inner inner) : inner_(std::move(inner)) {}

    Inner& inner() noexcept { return inner_; }
    const Inner& inner() const noexcept { return inner_; }

    /// The inner module under its own names (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("", inner_);
    }

private:
    Inner inner_;
};

/// Records each layer of `seq` in order.
template <class T, class... Layers>
Var<T> apply(Sequential<Layers...>& seq, const Var<T>& x);
/// Records x + apply(r.inner(), x); x's gradient is the sum of both paths'.
template <class T, class Inner>
Var<T> apply(Residual<Inner>& r, const Var<T>& x) {
    return x + apply(r.inner(), x);
}

template <class T, class... Layers>
Var<T> apply(Sequential<Layers...>& seq, const Var<T>& x) {
    Var<T> y = x;
    seq.for_each_layer([&](auto& layer) { y = apply(layer, y); });
    return y;
}

}  // namespace headwise::autograd
