// SPDX-License-Identifier: MIT
// The module contract every layer follows: named parameters with gradients, state dicts, modes.
#pragma once

#include <algorithm>  // std::copy_n, std::fill_n
#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::forward, std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise {

/// A named parameter and its gradient, both views into the module that owns them (for optimiser
/// steps). Parameter<const T> comes from a const module.
template <class T>
struct Parameter {
    std::string name;
    TensorView<T> value;
    TensorView<T> grad;
};

/// Parameters (or gradients) by name, as torch's state_dict().
template <class T>
using StateDict = std::map<std::string, Tensor<T>>;

/// The module contract (CRTP base). A layer `class Foo : public Module<Foo, T>` provides
///
///   static constexpr const char* kName = "headwise::Foo";          // prefix of error messages
///   template <class Self, class Visit>
///   static void visit_parameters(Self& self, Visit&& visit);       // visit(name, value, grad)
///
/// where `Self` is `Foo` or `const Foo` and `value`, `grad` are views of matching constness, in
/// the order of torch's state_dict(). A layer made of layers visits each child with a name prefix
/// (see visit_child) and forwards train()/eval() to its children through
///
///   template <class Self, class Visit>
///   static void visit_children(Self& self, Visit&& visit);          // visit(child module)
///
/// From these the base gives every layer the same surface:
///   parameters()                       name, value view, gradient view of every parameter
///   zero_grad()                        every gradient to zero
///   state_dict(prefix), grad_dict(prefix)      copies under torch's names, optionally prefixed
///   load_state_dict(sd, prefix)        strict; checked in full before anything is written
///   train(on), eval(), is_training()   a new module is in training mode, as in torch
/// and each layer adds `forward(...)` returning what its `backward(...)` consumes.
template <class Derived, class T>
class Module {
public:
    using value_type = T;
    using StateDict = headwise::StateDict<T>;

    /// Views of every parameter and its gradient, under state_dict() names.
    std::vector<Parameter<T>> parameters() {
        std::vector<Parameter<T>> out;
        Derived::visit_parameters(derived(),
                                  [&](const std::string& name, TensorView<T> value,
                                      TensorView<T> grad) { out.push_back({name, value, grad}); });
        return out;
    }
    std::vector<Parameter<const T>> parameters() const {
        std::vector<Parameter<const T>> out;
        Derived::visit_parameters(derived(), [&](const std::string& name,
                                                 TensorView<const T> value,
                                                 TensorView<const T> grad) {
            out.push_back({name, value, grad});
        });
        return out;
    }

    /// Number of learnt scalars.
    Index parameter_count() const {
        Index n = 0;
        for (const Parameter<const T>& p : parameters()) n += p.value.numel();
        return n;
    }

    /// Sets every gradient to zero.
    void zero_grad() {
        for (Parameter<T>& p : parameters()) std::fill_n(p.grad.data(), p.grad.numel(), T(0));
    }

    /// Copies of the parameters under torch's state_dict() names, each preceded by `prefix`.
    StateDict state_dict(const std::string& prefix = "") const {
        StateDict sd;
        for (const Parameter<const T>& p : parameters()) sd.emplace(prefix + p.name, p.value);
        return sd;
    }

    /// Copies of the gradients under the names of state_dict().
    StateDict grad_dict(const std::string& prefix = "") const {
        StateDict sd;
        for (const Parameter<const T>& p : parameters()) sd.emplace(prefix + p.name, p.grad);
        return sd;
    }

    /// Strict load. Without a prefix `state` must hold exactly the keys of state_dict(), each with
    /// its shape. With a prefix (e.g. "encoder.layers.0.") only the keys that start with it are
    /// read, with the prefix removed, and those must be exactly this module's; keys without the
    /// prefix belong to other modules and are ignored. Everything is checked before anything is
    /// written, so a failed load leaves the module as it was; the views from parameters() stay
    /// valid.
    void load_state_dict(const StateDict& state, const std::string& prefix = "");

    /// Training mode (the default for a new module) or evaluation mode; forwarded to children.
    void train(bool on = true) {
        training_ = on;
        Derived::visit_children(derived(), [on](auto& child) { child.train(on); });
    }
    void eval() { train(false); }
    bool is_training() const noexcept { return training_; }

    /// Default: no children.
    template <class Self, class Visit>
    static void visit_children(Self&, Visit&&) {}

protected:
    Module() = default;

    /// Visits the parameters of `child` with `prefix` (e.g. "linear1.") before each name.
    template <class Child, class Visit>
    static void visit_child(Child& child, const std::string& prefix, Visit&& visit) {
        std::remove_const_t<Child>::visit_parameters(
            child, [&](const std::string& name, auto value, auto grad) {
                visit(prefix + name, value, grad);
            });
    }

    bool training_ = true;

private:
    Derived& derived() noexcept { return static_cast<Derived&>(*this); }
    const Derived& derived() const noexcept { return static_cast<const Derived&>(*this); }
};

// ---- definitions ----------------------------------------------------------------------------

template <class Derived, class T>
void Module<Derived, T>::load_state_dict(const StateDict& state, const std::string& prefix) {
    const std::string fn = std::string(Derived::kName) + "::load_state_dict";
    const std::vector<Parameter<T>> params = parameters();
    auto expected_keys = [&] {
        std::string keys;
        for (const Parameter<T>& p : params) keys += (keys.empty() ? "" : ", ") + prefix + p.name;
        return keys;
    };
    // Keys this load reads that no parameter has (only those under the prefix, if one is given).
    std::vector<std::string> unexpected;
    for (const auto& entry : state) {
        if (entry.first.compare(0, prefix.size(), prefix) != 0) {
            if (prefix.empty()) unexpected.push_back(entry.first);
            continue;
        }
        bool known = false;
        for (const Parameter<T>& p : params) known = known || prefix + p.name == entry.first;
        if (!known) unexpected.push_back(entry.first);
    }
    auto also_unexpected = [&] {
        std::string s;
        for (const std::string& key : unexpected) s += (s.empty() ? "" : ", ") + key;
        return s.empty() ? std::string() : " (unexpected keys: " + s + ")";
    };
    for (const Parameter<T>& p : params) {
        const std::string key = prefix + p.name;
        const auto it = state.find(key);
        if (it == state.end())
            throw std::invalid_argument(fn + ": " + key +
                                        ": missing from the state dict, expected shape " +
                                        p.value.shape().str() + also_unexpected());
        detail::check_shape(fn.c_str(), key.c_str(), it->second.shape(), p.value.shape());
    }
    if (!unexpected.empty()) {
        const Tensor<T>& extra = state.at(unexpected.front());
        throw std::invalid_argument(fn + ": " + unexpected.front() +
                                    ": unexpected key in the state dict (shape " +
                                    extra.shape().str() + "); expected keys: " + expected_keys());
    }
    for (const Parameter<T>& p : params) {
        const Tensor<T>& src = state.at(prefix + p.name);
        std::copy_n(src.data(), src.numel(), p.value.data());
    }
}

}  // namespace headwise
