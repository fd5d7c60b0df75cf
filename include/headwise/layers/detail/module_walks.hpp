// SPDX-License-Identifier: MIT
// The module contract's walks over a module tree's declarations (layers/module.hpp): what a
// declared parameter is, and the walks that list parameters, weight matrices, random streams and
// modes.
#pragma once

#include <algorithm>  // std::find
#include <cstdint>    // std::uint64_t
#include <string>     // std::string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "../../config.hpp"
#include "../../precision.hpp"
#include "../../random.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "../weight_matrix.hpp"

namespace headwise::detail {

/// One declared parameter as a module tree walk sees it: a whole tensor with its gradient, or
/// a view (offset, shape) into a WeightMatrix holder.
template <class T>
struct DeclaredParameter {
    Tensor<T>* value = nullptr;  // plain parameter
    Tensor<T>* grad = nullptr;
    WeightMatrix<T>* holder = nullptr;  // weight-matrix parameter
    Index offset = 0;
    Shape shape;
    // A module of the older contract lists views of its own.
    TensorView<T> value_view, grad_view;
    bool is_view = false;
    // A piece of a plain parameter (offset, shape) that a parent lists under its own name.
    bool sliced = false;

    bool released() const noexcept { return holder && holder->released(); }
    /// The value, written in place by loaders (needs !released()).
    TensorView<T> value_of() const {
        if (is_view) return value_view;
        if (holder) return TensorView<T>(holder->value().data() + offset, shape);
        if (sliced) return TensorView<T>(value->data() + offset, shape);
        return value->view();
    }
    /// The gradient, allocated (zero) on first use.
    TensorView<T> grad_of() const {
        if (is_view) return grad_view;
        if (holder) return TensorView<T>(holder->grad().data() + offset, shape);
        if (grad->shape() != value->shape()) *grad = Tensor<T>(value->shape());
        if (sliced) return TensorView<T>(grad->data() + offset, shape);
        return grad->view();
    }
    Shape shape_of() const {
        if (is_view) return value_view.shape();
        return holder || sliced ? shape : value->shape();
    }
};

/// A declared parameter with its full name and the kName of the module that declared it.
template <class T>
struct ListedParameter {
    std::string name;
    const char* owner;
    DeclaredParameter<T> where;
};

/// Default callbacks of a module tree walk: each walk overrides those it needs.
template <class T>
struct NoWalk {
    void parameter(const std::string&, const char*, const DeclaredParameter<T>&) {}
    void weight(WeightMatrix<T>&) {}
    void module(bool& /*training*/, Precision& /*precision*/) {}
    void random(std::uint64_t&) {}
    void random(Generator&) {}
};

/// A walk that keeps the parameters it is given and passes everything else on to `inner`
/// (Declaration::renamed_child).
template <class T, class Inner>
struct CollectingWalk {
    Inner& inner;
    std::vector<ListedParameter<T>> found;
    void parameter(const std::string& name, const char* owner, const DeclaredParameter<T>& p) {
        found.push_back({name, owner, p});
    }
    void weight(WeightMatrix<T>& w) { inner.weight(w); }
    void module(bool& training, Precision& precision) { inner.module(training, precision); }
    void random(std::uint64_t& counter) { inner.random(counter); }
    void random(Generator& g) { inner.random(g); }
};

template <class T>
struct ListParametersWalk : NoWalk<T> {
    std::vector<ListedParameter<T>> found;
    void parameter(const std::string& name, const char* owner, const DeclaredParameter<T>& p) {
        found.push_back({name, owner, p});
    }
};

template <class T>
struct WeightsWalk : NoWalk<T> {
    std::vector<WeightMatrix<T>*> found;
    void weight(WeightMatrix<T>& w) {
        if (std::find(found.begin(), found.end(), &w) == found.end()) found.push_back(&w);
    }
};

template <class T>
struct RandomWalk : NoWalk<T> {
    std::vector<std::pair<std::uint64_t*, Generator*>> streams;
    void random(std::uint64_t& c) { streams.push_back({&c, nullptr}); }
    void random(Generator& g) { streams.push_back({nullptr, &g}); }
};

template <class T>
struct ModesWalk : NoWalk<T> {
    bool training = true;
    bool set_precision = false;
    Precision precision = Precision::float32;
    void module(bool& t, Precision& p) {
        if (set_precision)
            p = precision;
        else
            t = training;
    }
};

/// Whether any weight matrix of the tree has released its float master.
template <class T>
struct ReleasedWalk : NoWalk<T> {
    bool released = false;
    void weight(WeightMatrix<T>& w) { released = released || w.released(); }
};

/// Throws, naming `function`, at the first weight matrix stored in a GGUF type.
template <class T>
struct StoredCheckWalk : NoWalk<T> {
    const char* function;
    void weight(WeightMatrix<T>& w) { w.check_trainable(function); }
};

}  // namespace headwise::detail
