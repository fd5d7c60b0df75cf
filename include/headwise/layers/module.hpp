// SPDX-License-Identifier: MIT
// The module contract every layer follows: named parameters with gradients, state dicts, modes.
#pragma once

#include <algorithm>    // std::copy_n, std::fill_n
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <map>          // std::map
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v, std::decay_t
#include <utility>      // std::forward, std::move
#include <vector>       // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../random.hpp"
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
///   random_state(), load_random_state(words)   where its dropout streams are (for checkpoints)
/// and each layer adds `forward(...)` returning what its `backward(...)` consumes. A layer whose
/// forwards draw random numbers (dropout) also visits each std::uint64_t counter and Generator
/// they draw from, so that random_state() covers them:
///
///   template <class Self, class Visit>
///   static void visit_random_state(Self& self, Visit&& visit);     // visit(counter), visit(g)
template <class Derived, class T>
class Module {
public:
    using value_type = T;
    using StateDict = headwise::StateDict<T>;

    /// Views of every parameter and its gradient, under state_dict() names.
    std::vector<Parameter<T>> parameters() {
        std::vector<Parameter<T>> out;
        Derived::visit_parameters(
            derived(), [&](const std::string& name, TensorView<T> value, TensorView<T> grad) {
                out.push_back({name, value, grad});
            });
        return out;
    }
    std::vector<Parameter<const T>> parameters() const {
        std::vector<Parameter<const T>> out;
        Derived::visit_parameters(derived(), [&](const std::string& name, TensorView<const T> value,
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

    /// Where the random streams of this module and its children stand (dropout: each Dropout's
    /// seed and count of masks drawn, each MultiheadAttention's generator), as integers in a
    /// fixed order (this module's, then its children's in visit_children order). Not part of
    /// state_dict(), so that state dicts keep torch's names. A module that loads this from a module
    /// of the same architecture (its weights too, with load_state_dict) draws the masks the other
    /// one would have drawn next: training continues exactly. Generator words are valid with the
    /// standard library that wrote them (see generator_state).
    std::vector<std::uint64_t> random_state() const {
        std::vector<std::uint64_t> words;
        append_random_state(words);
        return words;
    }
    /// Restores random_state(). Strict: throws std::invalid_argument naming the function when
    /// the word count differs from this module's or a generator's words are no generator state,
    /// before anything changes.
    void load_random_state(const std::vector<std::uint64_t>& words);

    /// Default: no children.
    template <class Self, class Visit>
    static void visit_children(Self&, Visit&&) {}
    /// Default: no random streams of its own.
    template <class Self, class Visit>
    static void visit_random_state(Self&, Visit&&) {}

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
    template <class, class>
    friend class Module;  // children's random state, whatever their layer type

    Derived& derived() noexcept { return static_cast<Derived&>(*this); }
    const Derived& derived() const noexcept { return static_cast<const Derived&>(*this); }

    void append_random_state(std::vector<std::uint64_t>& words) const;
    // Pass 1 (`parsed` empty on entry, `apply` false): checks words[pos...] and parses each
    // generator's words into `parsed`. Pass 2 (`apply` true): assigns counters and `parsed`.
    void read_random_state(const std::vector<std::uint64_t>& words, std::size_t& pos,
                           std::vector<Generator>& parsed, std::size_t& next_parsed, bool apply,
                           const std::string& fn);
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

template <class Derived, class T>
void Module<Derived, T>::append_random_state(std::vector<std::uint64_t>& words) const {
    Derived::visit_random_state(derived(), [&](const auto& stream) {
        if constexpr (std::is_same_v<std::decay_t<decltype(stream)>, Generator>) {
            const std::vector<std::uint64_t> g = generator_state(stream);
            words.insert(words.end(), g.begin(), g.end());
        } else {
            static_assert(std::is_same_v<std::decay_t<decltype(stream)>, std::uint64_t>,
                          "visit_random_state visits std::uint64_t counters and Generators");
            words.push_back(stream);
        }
    });
    Derived::visit_children(derived(),
                            [&](const auto& child) { child.append_random_state(words); });
}

template <class Derived, class T>
void Module<Derived, T>::read_random_state(const std::vector<std::uint64_t>& words,
                                           std::size_t& pos, std::vector<Generator>& parsed,
                                           std::size_t& next_parsed, bool apply,
                                           const std::string& fn) {
    Derived::visit_random_state(derived(), [&](auto& stream) {
        if constexpr (std::is_same_v<std::decay_t<decltype(stream)>, Generator>) {
            const std::size_t n = generator_state(stream).size();
            if (apply) {
                stream = parsed[next_parsed++];
            } else {
                Generator g;
                set_generator_state(
                    g, std::vector<std::uint64_t>(words.begin() + pos, words.begin() + pos + n), fn,
                    "words[" + std::to_string(pos) + ", " + std::to_string(pos + n) + ")");
                parsed.push_back(g);
            }
            pos += n;
        } else {
            if (apply) stream = words[pos];
            ++pos;
        }
    });
    Derived::visit_children(derived(), [&](auto& child) {
        child.read_random_state(words, pos, parsed, next_parsed, apply, fn);
    });
}

template <class Derived, class T>
void Module<Derived, T>::load_random_state(const std::vector<std::uint64_t>& words) {
    const std::string fn = std::string(Derived::kName) + "::load_random_state";
    const std::size_t expected = random_state().size();
    if (words.size() != expected)
        throw std::invalid_argument(fn + ": words: expected " + std::to_string(expected) +
                                    " words (this module's random streams), got " +
                                    std::to_string(words.size()));
    std::vector<Generator> parsed;
    std::size_t pos = 0, next_parsed = 0;
    read_random_state(words, pos, parsed, next_parsed, /*apply=*/false, fn);
    pos = 0;
    read_random_state(words, pos, parsed, next_parsed, /*apply=*/true, fn);
}

}  // namespace headwise
