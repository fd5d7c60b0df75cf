// SPDX-License-Identifier: MIT
// The module contract: a layer declares its parameters, children and random streams once;
// parameters(), state dicts, loading, modes, weight formats and memory follow from it.
#pragma once

#include <algorithm>    // std::copy_n, std::fill_n, std::find
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <functional>   // std::function
#include <map>          // std::map
#include <stdexcept>    // std::invalid_argument, std::logic_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v, std::decay_t
#include <utility>      // std::forward, std::move, std::pair
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../detail/precision_check.hpp"
#include "../error.hpp"
#include "../precision.hpp"
#include "../quant/types.hpp"
#include "../random.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/module_walks.hpp"
#include "weight_matrix.hpp"

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

/// What load_state_dict does with keys that are not the module's own names, as data: a model
/// loading a checkpoint written by another library states here which of its keys to skip and
/// which names the checkpoint spells differently. Empty (the default): strict, as torch's
/// load_state_dict(strict=True).
struct LoadRules {
    /// A key (after the prefix is removed) that is no parameter's is skipped, not refused, when
    /// it equals one of these or ends with one of `ignored_suffixes` (e.g. a buffer as
    /// "rotary_emb.inv_freq", or a tied "lm_head.weight").
    std::vector<std::string> ignored;
    std::vector<std::string> ignored_suffixes;
    /// Alternative spellings: a parameter named `first` is read from the key `second` when the
    /// state dict has no key `first` (e.g. {"embeddings.LayerNorm.weight",
    /// "embeddings.LayerNorm.gamma"}).
    std::vector<std::pair<std::string, std::string>> aliases;
    /// Parameters that may be absent from the state dict (left as they are), e.g. a pooler.
    std::vector<std::string> optional;
    /// A key (after the prefix is removed) that starts with one of these is skipped too (e.g.
    /// "pooler." for a head the model does not have).
    std::vector<std::string> ignored_prefixes;
};

/// One parameter of a child that its parent lists under a name of its own
/// (Declaration::renamed_child): the elements [offset, offset + shape.numel()) of the child's
/// parameter `of`, listed as `name` with `shape`.
struct ParameterPiece {
    std::string name;
    std::string of;
    Index offset = 0;
    Shape shape;
};

/// What a module's declaration talks to (see Module). `Walk` is one of the contract's walks.
template <class T, class Walk>
class Declaration {
public:
    Declaration(Walk& walk, std::string prefix, const char* owner, bool list_parameters)
        : walk_(walk), prefix_(std::move(prefix)), owner_(owner), list_(list_parameters) {}

    /// A parameter held as a tensor and its gradient (the gradient may be empty until first
    /// needed: it is allocated, zero, to the value's shape).
    void parameter(const char* name, Tensor<T>& value, Tensor<T>& grad) {
        detail::DeclaredParameter<T> p;
        p.value = &value;
        p.grad = &grad;
        if (list_) walk_.parameter(prefix_ + name, owner_, p);
    }
    /// A weight matrix the module multiplies by, whole.
    void parameter(const char* name, WeightMatrix<T>& w) { parameter(name, w, 0, w.shape()); }
    /// `shape` elements of a weight-matrix holder from `offset` on, as one parameter (one block
    /// holder declared as one or several matrices).
    void parameter(const char* name, WeightMatrix<T>& w, Index offset, const Shape& shape) {
        walk_.weight(w);
        detail::DeclaredParameter<T> p;
        p.holder = &w;
        p.offset = offset;
        p.shape = shape;
        if (list_) walk_.parameter(prefix_ + name, owner_, p);
    }
    /// A parameter listed by a module of the older contract (views of its own).
    void parameter_view(const std::string& name, TensorView<T> value, TensorView<T> grad) {
        detail::DeclaredParameter<T> p;
        p.value_view = value;
        p.grad_view = grad;
        p.is_view = true;
        if (list_) walk_.parameter(prefix_ + name, owner_, p);
    }
    /// A child module: its declarations, under "<name>." (an empty name: under this module's
    /// own prefix, as a wrapper whose state dict reads as the wrapped module's).
    template <class Child>
    void child(const std::string& name, Child& c) {
        c.walk_module(walk_, name.empty() ? prefix_ : prefix_ + name + ".", list_);
    }
    /// A child whose parameters this module lists under names of its own, in the order of
    /// `pieces` (a checkpoint that spells and cuts them differently, e.g. BERT's query, key and
    /// value as row blocks of a MultiheadAttention's in_proj_weight). The child's own walk runs
    /// as with child() (its modes, weight matrices and random streams); each listed piece
    /// keeps the child's kName as its owner. Every piece must lie inside its parameter.
    template <class Child>
    void renamed_child(Child& c, const std::vector<ParameterPiece>& pieces) {
        if (!list_) {
            c.walk_module(walk_, prefix_, false);
            return;
        }
        detail::CollectingWalk<T, Walk> collect{walk_, {}};
        c.walk_module(collect, "", true);
        for (const ParameterPiece& piece : pieces) {
            const detail::ListedParameter<T>* from = nullptr;
            for (const auto& p : collect.found)
                if (p.name == piece.of) from = &p;
            const Index n = from ? from->where.shape_of().numel() : 0;
            if (!from || piece.offset < 0 || piece.offset + piece.shape.numel() > n)
                throw std::logic_error(std::string(owner_) + ": " + piece.name + ": no piece of " +
                                       (from ? "" : "a parameter named ") + piece.of);
            detail::DeclaredParameter<T> q = from->where;
            if (q.is_view) {
                q.value_view = TensorView<T>(q.value_view.data() + piece.offset, piece.shape);
                q.grad_view = TensorView<T>(q.grad_view.data() + piece.offset, piece.shape);
            } else {
                q.sliced = !q.holder;
                q.offset += piece.offset;
                q.shape = piece.shape;
            }
            walk_.parameter(prefix_ + piece.name, from->owner, q);
        }
    }
    /// A child of a module of the older contract, whose parameters that module lists itself.
    template <class Child>
    void unlisted_child(Child& c) {
        c.walk_module(walk_, prefix_, false);
    }
    /// A random stream the module's forwards draw from (dropout): a counter or a generator,
    /// saved and restored by random_state().
    void random(std::uint64_t& counter) { walk_.random(counter); }
    void random(Generator& g) { walk_.random(g); }

private:
    Walk& walk_;
    std::string prefix_;
    const char* owner_;
    bool list_;
};

/// The module contract (CRTP base). A layer `class Foo : public Module<Foo, T>` provides
///
///   static constexpr const char* kName = "headwise::Foo";   // prefix of error messages
///   template <class D>
///   void declare(D& d);                                      // its parts, once, in order
///
/// where the declaration calls, in the order of torch's state_dict() and under its names,
///
///   d.parameter("bias", value, grad);        // a Tensor<T> and its gradient (may be empty until
///                                            // first needed: allocated zero to value's shape)
///   d.parameter("weight", w);                // a WeightMatrix<T> the module multiplies by
///   d.parameter("q_proj_weight", w, offset, shape);    // a view of one (a block of several)
///   d.child("self_attn", self_attn_);        // a module: its parts under "self_attn."
///   d.renamed_child(attention_, pieces);     // a module: its parameters listed (and cut) under
///                                          // this module's own names (ParameterPiece)
///   d.random(counter) / d.random(generator); // a random stream its forwards draw from
///
/// (own random streams before children, so that random_state() lists a module's streams before
/// its children's). From that one declaration the base gives every module the same surface:
///   parameters(), named_parameters()   name, value view, gradient view of every parameter
///   parameter_count(), zero_grad()
///   state_dict(prefix), grad_dict(prefix)      copies under torch's names, optionally prefixed
///   load_state_dict(sd, prefix, rules) strict (LoadRules: what to skip, other spellings);
///                                      checked in full before anything is written
///   train(on), eval(), is_training()   a new module is in training mode, as in torch
///   with_precision(p, float_weights), precision(), float_weights_released()
///                                      every WeightMatrix of the tree switched at once
///   memory_bytes()                     the bytes of the parameters as stored
///   random_state(), load_random_state(words)   where its dropout streams are (for checkpoints)
/// and each layer adds `forward(...)` and the `backward(...)` that consumes what it returns.
///
/// The older form of the contract still works for modules written against it: static
/// `visit_parameters(self, visit)` (visit(name, value, grad) for every parameter, children's
/// included under their prefixes), `visit_children(self, visit)` and
/// `visit_random_state(self, visit)`. Modules that declare() get a visit_parameters from the
/// base, so either kind may hold the other.
template <class Derived, class T>
class Module {
public:
    using value_type = T;
    using StateDict = headwise::StateDict<T>;

    /// Views of every parameter and its gradient, under state_dict() names.
    std::vector<Parameter<T>> parameters() { return collect<T>(); }
    std::vector<Parameter<const T>> parameters() const {
        std::vector<Parameter<const T>> out;
        for (const Parameter<T>& p : mutable_self().template collect<T>())
            out.push_back({p.name, p.value, p.grad});
        return out;
    }
    /// The same as parameters() (torch's name for the named form).
    std::vector<Parameter<T>> named_parameters() { return parameters(); }
    std::vector<Parameter<const T>> named_parameters() const { return parameters(); }

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
    /// prefix belong to other modules and are ignored. `rules` relaxes this as data (keys to
    /// skip, other spellings, optional parameters: see LoadRules). Everything is checked before
    /// anything is written, so a failed load leaves the module as it was; the views from
    /// parameters() stay valid, and the copies of every WeightMatrix in a lower precision are
    /// taken anew from the loaded values. Gradients are not allocated by a load. Errors name
    /// `function` (a model's loader that calls this), else "<kName>::load_state_dict".
    void load_state_dict(const StateDict& state, const std::string& prefix = "",
                         const LoadRules& rules = {}, const char* function = nullptr);

    /// Training mode (the default for a new module) or evaluation mode, for the whole tree.
    /// Switching to evaluation mode takes new copies of the weights in a lower precision (see
    /// with_precision), so that evaluation after training steps reads the current weights.
    void train(bool on = true);
    void eval() { train(false); }
    bool is_training() const noexcept { return training_; }

    /// Precision::bf16 (float modules only): every weight matrix of the module and its children
    /// (the WeightMatrix holders: Linear's weight, MultiheadAttention's projections) multiplied in
    /// bf16 with float accumulation; everything else stays float (an Embedding's table too). With
    /// FloatWeights::keep the float weights stay the master weights: training is mixed precision
    /// (each training-mode product rounds the current float weight), evaluation reads bf16 copies
    /// taken here, on every eval() and after every load_state_dict (after changing weights in
    /// evaluation mode otherwise, call with_precision(Precision::bf16) again). With
    /// FloatWeights::release (inference only) the float weight matrices and their gradients are
    /// freed after the copies are taken: forward and decode give the results of keep bit for bit,
    /// every call that needs a float weight throws std::logic_error naming itself before anything
    /// changes, and with_precision(Precision::float32) brings float weights back, widened exactly
    /// from bf16. Throws std::invalid_argument naming "<kName>::with_precision" for a value that is
    /// no enumerator or bf16 on a double module, std::logic_error for bf16 with FloatWeights::keep
    /// once released; all before anything changes. See precision.hpp and docs/precision.md.
    Derived& with_precision(Precision precision, FloatWeights float_weights = FloatWeights::keep);
    /// Every weight matrix of the tree stored as `type`, a GGUF tensor type headwise quantizes
    /// (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K: quant::quantize_row, bit for bit
    /// as gguf.quants and llama.cpp), quantized once from the float weights as they are now; the
    /// products read the stored rows (ops::quant_matmul) without dequantizing the matrix.
    /// Everything else stays float (an Embedding's table too: it is stored only as a file stores
    /// it, see WeightMatrix::is_table). Inference only: backward throws std::logic_error naming
    /// the type. FloatWeights::keep keeps the float weights (state_dict() and loads work; a load
    /// quantizes again), release frees them (the weights then take quant::row_bytes per row).
    /// with_precision(Precision::float32) returns to float (released: the stored values,
    /// dequantized exactly). Throws std::invalid_argument naming "<kName>::with_weight_type"
    /// for a double module, a type it does not quantize, or a weight whose rows are no multiple
    /// of the type's block (naming the parameter); all before anything changes.
    Derived& with_weight_type(quant::Type type, FloatWeights float_weights = FloatWeights::keep);
    /// The type the weight matrices are stored in (quant::Type::f32 when the products read float
    /// or bf16: see precision()); that of the first one, which with_weight_type sets for all.
    quant::Type weight_type() const;
    /// Throws std::logic_error naming `function` and the type when a weight matrix of the tree is
    /// stored in a GGUF type (training calls check this before anything changes).
    void check_not_stored(const char* function) const {
        detail::StoredCheckWalk<T> walk{{}, function};  // allocates nothing
        mutable_self().walk_module(walk, "", false);
    }
    Precision precision() const noexcept { return precision_; }
    /// Prepared float weights for inference (on by default when called without an argument):
    /// every weight matrix of the tree keeps, beside its float master, a copy in the layout of
    /// the kernel that multiplies it (oneDNN's f32 matmul, the weight reordered once: no packing
    /// of the weight on every product; ops/prepared_gemm.hpp), which evaluation-mode products
    /// read. The copies are taken here if the module is in evaluation mode, else at the next
    /// eval(); again after every load_state_dict and every eval() (so evaluation after training
    /// steps reads the current weights); freed in training mode, whose products read the master.
    /// After changing weights in evaluation mode otherwise (through parameters()), call this
    /// again. They apply to Precision::float32 only (bf16 and stored weights are read as those
    /// formats; the wish is kept for a return to float32). Results are not bit for bit those of
    /// the plain products: oneDNN sums in its own order (the difference is float rounding of
    /// sum |x w|, bounded in tests/layers/test_prepared_weights.cpp); they are the same from call
    /// to call. A no-op, documented, where nothing can be prepared: double modules (oneDNN has
    /// no f64 matmul) and builds without oneDNN (HEADWISE_BF16=OFF or oneDNN not found);
    /// prepared_weights() says whether products read prepared weights. Bytes: the copies add
    /// about the float weights' size to memory_bytes(). off frees the copies.
    Derived& with_prepared_weights(bool on = true);
    /// Whether the products of the tree read prepared weights now: some weight matrix is
    /// prepared (with_prepared_weights(true), evaluation mode, float32, a build with oneDNN).
    bool prepared_weights() const;
    /// Whether any weight of the tree was released by with_precision(bf16, release).
    bool float_weights_released() const;
    /// Bytes of the parameters as stored (float weights unless released, their copies in a
    /// lower precision, every other parameter); gradients and scratch not counted.
    std::size_t memory_bytes() const;

    /// Where the random streams of this module and its children stand (dropout: each Dropout's
    /// seed and count of masks drawn, each MultiheadAttention's generator), as integers in a
    /// fixed order (this module's, then its children's in declaration order). Not part of
    /// state_dict(), so that state dicts keep torch's names. A module that loads this from a
    /// module of the same architecture (its weights too, with load_state_dict) draws the masks
    /// the other one would have drawn next: training continues exactly. Generator words are
    /// valid with the standard library that wrote them (see generator_state).
    std::vector<std::uint64_t> random_state() const;
    /// Restores random_state(). Strict: throws std::invalid_argument naming the function when
    /// the word count differs from this module's or a generator's words are no generator state,
    /// before anything changes.
    void load_random_state(const std::vector<std::uint64_t>& words);

    /// The older contract's parameter walk, for modules that declare(): visit(name, value, grad)
    /// for every parameter (gradients allocated), values and gradients const for a const Self.
    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        for (const Parameter<T>& p : const_cast<Derived&>(self).template collect<T>())
            visit(p.name, p.value, p.grad);
    }
    /// Default: no children (older contract).
    template <class Self, class Visit>
    static void visit_children(Self&, Visit&&) {}
    /// Default: no random streams of its own (older contract).
    template <class Self, class Visit>
    static void visit_random_state(Self&, Visit&&) {}

    /// The declaration of a module of the older contract, built from its visits.
    template <class D>
    void declare(D& d) {
        Derived::visit_parameters(
            derived(), [&](const std::string& name, TensorView<T> value, TensorView<T> grad) {
                d.parameter_view(name, value, grad);
            });
        Derived::visit_random_state(derived(), [&](auto& stream) { d.random(stream); });
        Derived::visit_children(derived(), [&](auto& child) { d.unlisted_child(child); });
    }

    /// Runs one of the contract's walks over this module and its children (Declaration::child
    /// calls it); `list_parameters` false for a child whose parent lists its parameters.
    template <class Walk>
    void walk_module(Walk& walk, const std::string& prefix, bool list_parameters) {
        walk.module(training_, precision_);
        Declaration<T, Walk> d(walk, prefix, Derived::kName, list_parameters);
        derived().declare(d);
    }

protected:
    Module() = default;

    /// Visits the parameters of `child` with `prefix` (e.g. "linear1.") before each name
    /// (older contract).
    template <class Child, class Visit>
    static void visit_child(Child& child, const std::string& prefix, Visit&& visit) {
        std::remove_const_t<Child>::visit_parameters(
            child, [&](const std::string& name, auto value, auto grad) {
                visit(prefix + name, value, grad);
            });
    }

    bool training_ = true;
    Precision precision_ = Precision::float32;

private:
    Derived& derived() noexcept { return static_cast<Derived&>(*this); }
    Derived& mutable_self() const noexcept {
        return const_cast<Derived&>(static_cast<const Derived&>(*this));
    }

    /// Every declared parameter (name, owner kName, where it is), refusing released weights
    /// (naming "<owner>::visit_parameters") before anything is allocated.
    std::vector<detail::ListedParameter<T>> list_parameters();
    template <class U>
    std::vector<Parameter<U>> collect() {
        std::vector<Parameter<U>> out;
        for (const detail::ListedParameter<T>& p : list_parameters())
            out.push_back({p.name, p.where.value_of(), p.where.grad_of()});
        return out;
    }
    /// Every WeightMatrix of the tree, each once.
    std::vector<WeightMatrix<T>*> weights();
    /// Every random stream of the tree, in order (a counter or a generator each).
    std::vector<std::pair<std::uint64_t*, Generator*>> random_streams();
};

// ---- definitions ----------------------------------------------------------------------------

template <class Derived, class T>
std::vector<detail::ListedParameter<T>> Module<Derived, T>::list_parameters() {
    detail::ListParametersWalk<T> walk;
    walk_module(walk, "", true);
    for (const detail::ListedParameter<T>& p : walk.found)
        if (p.where.released())
            detail::throw_float_weights_released(
                std::string(p.owner) + "::visit_parameters",
                "this call needs the float weights (the module is inference-only) "
                "(with_precision(Precision::float32) brings them back, widened from bf16)");
    return std::move(walk.found);
}

template <class Derived, class T>
std::vector<WeightMatrix<T>*> Module<Derived, T>::weights() {
    detail::WeightsWalk<T> walk;
    walk_module(walk, "", true);
    return std::move(walk.found);
}

template <class Derived, class T>
std::vector<std::pair<std::uint64_t*, Generator*>> Module<Derived, T>::random_streams() {
    detail::RandomWalk<T> walk;
    walk_module(walk, "", true);
    return std::move(walk.streams);
}

template <class Derived, class T>
void Module<Derived, T>::load_state_dict(const StateDict& state, const std::string& prefix,
                                         const LoadRules& rules, const char* function) {
    const std::string fn =
        function ? std::string(function) : std::string(Derived::kName) + "::load_state_dict";
    const std::vector<detail::ListedParameter<T>> params = list_parameters();
    auto has = [](const std::vector<std::string>& names, const std::string& n) {
        return std::find(names.begin(), names.end(), n) != names.end();
    };
    auto expected_keys = [&] {
        std::string keys;
        for (const auto& p : params) keys += (keys.empty() ? "" : ", ") + prefix + p.name;
        return keys;
    };
    // The key each parameter is read from: its name, else an alias the state dict has; or
    // none (an optional parameter the state dict lacks).
    std::vector<const Tensor<T>*> source(params.size(), nullptr);
    std::vector<std::string> used;  // keys read, after the prefix
    for (std::size_t i = 0; i < params.size(); ++i) {
        auto it = state.find(prefix + params[i].name);
        if (it == state.end())
            for (const auto& alias : rules.aliases)
                if (alias.first == params[i].name) {
                    it = state.find(prefix + alias.second);
                    if (it != state.end()) break;
                }
        if (it != state.end()) {
            source[i] = &it->second;
            used.push_back(it->first.substr(prefix.size()));
        }
    }
    auto ignored = [&](const std::string& key) {
        if (has(rules.ignored, key)) return true;
        for (const std::string& s : rules.ignored_prefixes)
            if (key.compare(0, s.size(), s) == 0) return true;
        for (const std::string& s : rules.ignored_suffixes)
            if (key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0)
                return true;
        return false;
    };
    // Keys this load reads that no parameter has (only those under the prefix, if one is given).
    std::vector<std::string> unexpected;
    for (const auto& entry : state) {
        if (entry.first.compare(0, prefix.size(), prefix) != 0) {
            if (prefix.empty()) unexpected.push_back(entry.first);
            continue;
        }
        const std::string key = entry.first.substr(prefix.size());
        if (!has(used, key) && !ignored(key)) unexpected.push_back(entry.first);
    }
    auto also_unexpected = [&] {
        std::string s;
        for (const std::string& key : unexpected) s += (s.empty() ? "" : ", ") + key;
        return s.empty() ? std::string() : " (unexpected keys: " + s + ")";
    };
    for (std::size_t i = 0; i < params.size(); ++i) {
        const std::string key = prefix + params[i].name;
        const Shape shape = params[i].where.shape_of();
        if (!source[i]) {
            if (has(rules.optional, params[i].name)) continue;
            throw std::invalid_argument(fn + ": " + key +
                                        ": missing from the state dict, expected shape " +
                                        shape.str() + also_unexpected());
        }
        detail::check_shape(fn.c_str(), key.c_str(), source[i]->shape(), shape);
    }
    if (!unexpected.empty()) {
        const Tensor<T>& extra = state.at(unexpected.front());
        throw std::invalid_argument(fn + ": " + unexpected.front() +
                                    ": unexpected key in the state dict (shape " +
                                    extra.shape().str() + "); expected keys: " + expected_keys());
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (!source[i]) continue;
        const TensorView<T> dst = params[i].where.value_of();
        std::copy_n(source[i]->data(), source[i]->numel(), dst.data());
    }
    for (WeightMatrix<T>* w : weights()) {
        w->refresh();
        if (w->stored() && !w->released()) w->set_stored(w->stored_type(), FloatWeights::keep);
    }
}

template <class Derived, class T>
void Module<Derived, T>::train(bool on) {
    detail::ModesWalk<T> walk;
    walk.training = on;
    walk_module(walk, "", true);
    for (WeightMatrix<T>* w : weights()) {
        w->set_training(on);
        if (!on) w->refresh();
    }
}

template <class Derived, class T>
Derived& Module<Derived, T>::with_precision(Precision precision, FloatWeights float_weights) {
    const std::string fn = std::string(Derived::kName) + "::with_precision";
    if (precision != Precision::float32 && precision != Precision::bf16)
        throw_invalid_argument(fn, "precision", "Precision::float32 or Precision::bf16",
                               std::to_string(static_cast<int>(precision)));
    if (precision == Precision::bf16 && !std::is_same_v<T, float>) {
        std::string type = Derived::kName;
        type = type.substr(type.rfind(':') + 1);
        throw_invalid_argument(fn, "precision", "Precision::float32 for a " + type + "<double>",
                               "Precision::bf16 (bf16 is for float modules)");
    }
    detail::check_precision<T>(fn.c_str(), precision, float_weights, float_weights_released());
    for (WeightMatrix<T>* w : weights())  // tables stay float (WeightMatrix::is_table)
        if (precision == Precision::float32 || !w->is_table())
            w->set_precision(precision, float_weights);
    detail::ModesWalk<T> walk;
    walk.set_precision = true;
    walk.precision = precision;
    walk_module(walk, "", true);
    return derived();
}

template <class Derived, class T>
Derived& Module<Derived, T>::with_weight_type(quant::Type type, FloatWeights float_weights) {
    const std::string fn = std::string(Derived::kName) + "::with_weight_type";
    if (!std::is_same_v<T, float>) {
        std::string name = Derived::kName;
        name = name.substr(name.rfind(':') + 1);
        throw_invalid_argument(fn, "type", "a float module (" + name + "<float>)",
                               name + "<double>");
    }
    const bool quantizable = quant::is_readable(static_cast<std::uint32_t>(type)) &&
                             type != quant::Type::f32 && quant::block_format(type).quantizable;
    if (!quantizable)
        throw_invalid_argument(fn, "type", "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K or Q6_K",
                               quant::describe_type(static_cast<std::uint32_t>(type)));
    if (float_weights != FloatWeights::keep && float_weights != FloatWeights::release)
        throw_invalid_argument(fn, "float_weights", "FloatWeights::keep or FloatWeights::release",
                               std::to_string(static_cast<int>(float_weights)));
    // Every weight's rows checked first, named by the first parameter that views it.
    detail::ListParametersWalk<T> walk;
    walk_module(walk, "", true);
    const Index block = quant::block_format(type).block_size;
    for (WeightMatrix<T>* w : weights()) {
        if (w->is_table() || (w->row_length() > 0 && w->row_length() % block == 0)) continue;
        std::string name = "a weight matrix";
        for (const detail::ListedParameter<T>& p : walk.found)
            if (p.where.holder == w) {
                name = p.name;
                break;
            }
        throw_invalid_argument(fn, name.c_str(),
                               "rows of a multiple of " + std::to_string(block) + " values (" +
                                   quant::block_format(type).name + " blocks)",
                               w->row_length() > 0 ? "rows of " + std::to_string(w->row_length())
                                                   : std::string("rows of different lengths"));
    }
    for (WeightMatrix<T>* w : weights())
        if (!w->is_table()) w->set_stored(type, float_weights);
    detail::ModesWalk<T> modes;
    modes.set_precision = true;
    modes.precision = Precision::float32;
    walk_module(modes, "", true);
    return derived();
}

template <class Derived, class T>
Derived& Module<Derived, T>::with_prepared_weights(bool on) {
    for (WeightMatrix<T>* w : weights())
        if (!w->is_table()) w->set_prepared(on);
    return derived();
}

template <class Derived, class T>
bool Module<Derived, T>::prepared_weights() const {
    for (const WeightMatrix<T>* w : mutable_self().weights())
        if (w->prepared()) return true;
    return false;
}

template <class Derived, class T>
quant::Type Module<Derived, T>::weight_type() const {
    for (const WeightMatrix<T>* w : mutable_self().weights())
        if (!w->is_table()) return w->stored_type();
    return quant::Type::f32;
}

template <class Derived, class T>
bool Module<Derived, T>::float_weights_released() const {
    detail::ReleasedWalk<T> walk;  // allocates nothing: composites ask on every backward
    mutable_self().walk_module(walk, "", false);
    return walk.released;
}

template <class Derived, class T>
std::size_t Module<Derived, T>::memory_bytes() const {
    detail::ListParametersWalk<T> walk;
    mutable_self().walk_module(walk, "", true);
    std::size_t bytes = 0;
    for (const detail::ListedParameter<T>& p : walk.found)
        if (!p.where.holder)
            bytes += sizeof(T) * static_cast<std::size_t>(p.where.shape_of().numel());
    for (const WeightMatrix<T>* w : mutable_self().weights()) bytes += w->memory_bytes();
    return bytes;
}

template <class Derived, class T>
std::vector<std::uint64_t> Module<Derived, T>::random_state() const {
    std::vector<std::uint64_t> words;
    for (const auto& s : mutable_self().random_streams()) {
        if (s.first) {
            words.push_back(*s.first);
        } else {
            const std::vector<std::uint64_t> g = generator_state(*s.second);
            words.insert(words.end(), g.begin(), g.end());
        }
    }
    return words;
}

template <class Derived, class T>
void Module<Derived, T>::load_random_state(const std::vector<std::uint64_t>& words) {
    const std::string fn = std::string(Derived::kName) + "::load_random_state";
    const std::size_t expected = random_state().size();
    if (words.size() != expected)
        throw std::invalid_argument(fn + ": words: expected " + std::to_string(expected) +
                                    " words (this module's random streams), got " +
                                    std::to_string(words.size()));
    const auto streams = random_streams();
    // Every generator parsed first (a malformed one throws before anything changes).
    std::vector<Generator> parsed;
    std::size_t pos = 0;
    for (const auto& s : streams) {
        if (s.first) {
            ++pos;
            continue;
        }
        const std::size_t n = generator_state(*s.second).size();
        Generator g;
        set_generator_state(
            g, std::vector<std::uint64_t>(words.begin() + pos, words.begin() + pos + n), fn,
            "words[" + std::to_string(pos) + ", " + std::to_string(pos + n) + ")");
        parsed.push_back(g);
        pos += n;
    }
    pos = 0;
    std::size_t next = 0;
    for (const auto& s : streams) {
        if (s.first) {
            *s.first = words[pos++];
        } else {
            pos += generator_state(*s.second).size();
            *s.second = parsed[next++];
        }
    }
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_MODULE_TEMPLATES(C, F, T) C(struct, Parameter<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_MODULE_TEMPLATES);
