// SPDX-License-Identifier: MIT
// Tape<T> and its Var<T> handles: reverse mode over recorded module calls, one backward for all.
#pragma once

#include <atomic>            // std::atomic
#include <cstddef>           // std::size_t
#include <cstdint>           // std::uint64_t
#include <functional>        // std::function
#include <initializer_list>  // std::initializer_list
#include <limits>            // std::numeric_limits
#include <memory>            // std::shared_ptr, std::make_shared
#include <stdexcept>         // std::invalid_argument
#include <string>            // std::string
#include <utility>           // std::move
#include <vector>            // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise::autograd {

template <class T>
class Tape;

/// A value computed under a Tape: a read-only view of a tensor that the Var keeps alive, and,
/// when the tape recorded the call that made it, the node of the tape that backward reaches
/// it through. Cheap to copy (copies share the tensor). A Var belongs to one tape and to one
/// recording of it, which it names by a number no other recording of any tape of the process
/// shares: after clear() (or a new recording following backward) it is a stale handle that
/// recorded functions refuse, and so is a Var whose tape was destroyed (even when a new tape
/// sits at the same address) or that another tape made.
template <class T>
class Var {
public:
    Var() = default;

    TensorView<const T> value() const noexcept { return value_; }
    const Shape& shape() const noexcept { return value_.shape(); }
    Index numel() const noexcept { return value_.numel(); }
    /// The single element of a one-element value (a loss), as double.
    double item() const;
    /// Whether backward reaches this value (the tape recorded the call that made it).
    bool recorded() const noexcept { return node_ != kNone; }
    /// The tape that made it; nullptr for an empty Var and once that tape was destroyed.
    Tape<T>* tape() const noexcept { return tape_ ? *tape_ : nullptr; }

private:
    friend class Tape<T>;
    static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

    // The tape's own pointer to itself, which its destructor sets to nullptr: a Var never
    // reaches a destroyed tape, nor mistakes a new tape at the same address for its own.
    std::shared_ptr<Tape<T>* const> tape_;
    std::size_t node_ = kNone;          // index into the tape's nodes, or kNone
    std::uint64_t recording_ = 0;       // which recording made it (process-wide, never reused)
    std::shared_ptr<const void> keep_;  // owns what value_ views
    TensorView<const T> value_;
};

/// Records the module calls, additions, reshapes, concatenations and losses that the functions
/// of autograd/functions.hpp run, and runs their backwards in reverse order with one call:
///
///   Tape<float> tape;
///   Var<float> x = tape.input(batch);                    // a leaf (no gradient wanted)
///   Var<float> h = apply(layer, x) + x;                  // residual: gradients sum
///   Var<float> loss = cross_entropy(apply(head, h), targets);
///   tape.backward(loss);                                 // ADDS into every module's gradients
///
/// Each recorded call keeps what its module's backward needs (the forward's input or its
/// Forward record); backward hands these to the module's own backward, which adds the parameter
/// gradients as it does when called by hand, and frees each node's saved activations as soon as
/// its backward has run. A value used by several calls gets the sum of their gradients.
///
/// In no-grad mode (Tape(no_grad) or set_recording(false)) nothing is recorded: the functions
/// run the modules' forwards and return Vars that only hold the values, so evaluation costs the
/// plain forward and one small allocation per call (the result's shared holder). A call whose
/// inputs need no gradient and that has no parameters is not recorded either. A module's mode is
/// its own: no-grad mode does not switch dropout off (eval() does), as in torch.
template <class T>
class Tape {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr bool no_grad = false;

    /// A tape that records (the default) or not (`Tape<T> tape(Tape<T>::no_grad)`).
    explicit Tape(bool recording = true) : recording_(recording) {}
    // Vars point at their tape: it stays where it is.
    Tape(const Tape&) = delete;
    Tape& operator=(const Tape&) = delete;
    /// The Vars it made say from now on that their tape no longer exists.
    ~Tape() { *self_ = nullptr; }

    /// The tape of `v`, for a recorded function: throws std::invalid_argument naming `function`
    /// and `argument` for an empty Var or one whose tape was destroyed.
    static Tape& of(const char* function, const char* argument, const Var<T>& v);

    bool recording() const noexcept { return recording_; }
    /// Switches recording on or off for the calls that follow; what is recorded stays.
    void set_recording(bool on) noexcept { recording_ = on; }

    /// A leaf: `value` (pass it with std::move to avoid a copy) as a Var of this tape. With
    /// requires_grad (and a recording tape) backward keeps its gradient, read with grad(); without,
    /// it is a constant that backward does not reach.
    Var<T> input(Tensor<T> value, bool requires_grad = false);
    /// A module parameter as a Var, viewing `value` without a copy (for weights used outside the
    /// module's own forward: a tied LM head's logits = h E^T with E the embedding table, e.g.
    /// `auto p = embedding.parameters()[0]; tape.parameter(p.value, p.grad)`). On a recording
    /// tape backward ADDS the parameter's gradient into `grad` (the module's gradient, summed with
    /// what the module's own backward adds); tape.grad() does not hold it. Both views must stay
    /// valid and `value` unchanged until backward has run. Throws shape_error (naming
    /// headwise::autograd::Tape::parameter and grad) when grad's shape is not value's.
    Var<T> parameter(TensorView<T> value, TensorView<T> grad);

    /// Backpropagates from `loss`, which must hold one element, with seed d loss = 1. Throws
    /// std::invalid_argument (before any gradient changes) for a Var of another tape, of an
    /// earlier recording, one backward cannot reach, or a second backward over one recording
    /// (the first freed the saved activations); shape_error for a loss of more than one
    /// element. Each record's saved activations are freed once its backward has run, the rest
    /// at the end; leaf gradients stay for grad(). Should a module's backward throw, the
    /// parameter gradients added before stay added and the recording is spent.
    void backward(const Var<T>& loss);
    /// The same from any recorded `output` with d output = grad_output (its shape).
    void backward(const Var<T>& output, TensorView<const T> grad_output);

    /// The gradient of the last backward's loss with respect to leaf `x`, an input() with
    /// requires_grad (zeros where the loss does not depend on it). Valid until clear() or the
    /// next recording. Throws std::invalid_argument for a Var that is no such leaf of this
    /// recording or before backward.
    const Tensor<T>& grad(const Var<T>& x) const;

    /// Recorded calls still holding saved activations (0 after backward or clear()).
    std::size_t size() const noexcept { return live_; }
    /// Frees every saved activation and leaf gradient and starts a new recording; the Vars of
    /// the old one become stale.
    void clear();

    // ---- for the recorded functions (autograd/functions.hpp) --------------------------------

    using Backward = std::function<void(TensorView<const T> dy)>;

    /// Checks that every Var in `inputs` belongs to this tape's current recording (naming
    /// `function` and the argument `names[i]` otherwise) and says whether a call on them is to
    /// be recorded: the tape records, and some input is recorded or the call has parameters.
    /// A call after a backward starts a new recording first.
    bool begin_call(const char* function, std::initializer_list<const Var<T>*> inputs,
                    std::initializer_list<const char*> names, bool has_parameters) {
        HEADWISE_ASSERT(inputs.size() == names.size());
        return begin_call(function, inputs.begin(), names.begin(), inputs.size(), has_parameters);
    }
    /// The same for `count` inputs (no allocation, so that a call not recorded costs nothing).
    bool begin_call(const char* function, const Var<T>* const* inputs, const char* const* names,
                    std::size_t count, bool has_parameters);
    /// A Var holding `value` (kept alive by `keep`), not recorded.
    Var<T> constant(std::shared_ptr<const void> keep, TensorView<const T> value);
    /// A Var holding `value` whose backward is `backward` (called once with d value, to hand
    /// each input's gradient to accumulate()). Only after begin_call returned true.
    Var<T> record(std::shared_ptr<const void> keep, TensorView<const T> value, Backward backward);
    /// Adds `dx` to the gradient of `x` during backward; nothing if x is not recorded.
    void accumulate(const Var<T>& x, Tensor<T>&& dx);

private:
    struct Node {
        Backward backward;  // empty for leaves and after it ran
        Tensor<T> grad;     // d loss / d value, summed over its uses (when has_grad)
        Shape shape;        // the value's
        bool has_grad = false;
        bool leaf = false;
    };

    void check_var(const char* function, const char* argument, const Var<T>& v) const;
    void new_recording();
    /// A number no recording of any tape of this scalar type had before, nor will have.
    static const char* without_tape(bool empty) noexcept {
        return empty ? "is an empty Var (made by no tape)"
                     : "belongs to a tape that no longer exists (a Var must not outlive its tape)";
    }
    static std::uint64_t next_recording() noexcept {
        static std::atomic<std::uint64_t> counter{0};
        return ++counter;  // starts at 1: 0 is an empty Var's
    }

    std::shared_ptr<Tape*> self_ = std::make_shared<Tape*>(this);
    std::vector<Node> nodes_;
    std::uint64_t recording_id_ = next_recording();
    std::size_t live_ = 0;  // nodes whose backward (and saved activations) are held
    bool recording_ = true;
    bool done_ = false;  // backward ran over the current recording
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
double Var<T>::item() const {
    if (value_.numel() != 1)
        throw shape_error("headwise::autograd::Var::item", "value", "one element", shape());
    return static_cast<double>(value_.data()[0]);
}

template <class T>
void Tape<T>::new_recording() {
    nodes_.clear();
    live_ = 0;
    done_ = false;
    recording_id_ = next_recording();
}

template <class T>
void Tape<T>::clear() {
    new_recording();
}

template <class T>
Tape<T>& Tape<T>::of(const char* function, const char* argument, const Var<T>& v) {
    if (v.tape() == nullptr)
        throw std::invalid_argument(std::string(function) + ": " + argument + ": " +
                                    without_tape(v.tape_ == nullptr));
    return *v.tape();
}

template <class T>
void Tape<T>::check_var(const char* function, const char* argument, const Var<T>& v) const {
    if (v.tape() == nullptr)
        throw std::invalid_argument(std::string(function) + ": " + argument + ": " +
                                    without_tape(v.tape_ == nullptr));
    // The identity of the shared self-pointer, not the address: a tape made where a destroyed one
    // was has another.
    if (v.tape_ != self_)
        throw std::invalid_argument(std::string(function) + ": " + argument +
                                    ": belongs to another tape");
    if (v.recording_ != recording_id_)
        throw std::invalid_argument(std::string(function) + ": " + argument +
                                    ": is stale: recorded before the tape was cleared or a new "
                                    "recording began");
}

template <class T>
Var<T> Tape<T>::input(Tensor<T> value, bool requires_grad) {
    if (done_) new_recording();
    auto owned = std::make_shared<Tensor<T>>(std::move(value));
    TensorView<const T> view = *owned;
    if (!(requires_grad && recording_)) return constant(std::move(owned), view);
    Var<T> v = constant(std::move(owned), view);
    Node n;
    n.shape = view.shape();
    n.leaf = true;
    nodes_.push_back(std::move(n));
    v.node_ = nodes_.size() - 1;
    return v;
}

template <class T>
Var<T> Tape<T>::parameter(TensorView<T> value, TensorView<T> grad) {
    headwise::detail::check_shape("headwise::autograd::Tape::parameter", "grad", grad.shape(),
                                  value.shape());
    if (done_) new_recording();
    const TensorView<const T> view = value;
    if (!recording_) return constant(nullptr, view);
    // A node without inputs whose backward adds d value into the module's gradient.
    return record(nullptr, view, [grad](TensorView<const T> dy) {
        for (Index i = 0; i < dy.numel(); ++i) grad.data()[i] += dy.data()[i];
    });
}

template <class T>
bool Tape<T>::begin_call(const char* function, const Var<T>* const* inputs,
                         const char* const* names, std::size_t count, bool has_parameters) {
    for (std::size_t i = 0; i < count; ++i) check_var(function, names[i], *inputs[i]);
    if (done_) {
        // A recorded input of the finished recording has no node any more.
        for (std::size_t i = 0; i < count; ++i)
            if (inputs[i]->recorded())
                throw std::invalid_argument(std::string(function) + ": " + names[i] +
                                            ": was recorded before backward, which freed its "
                                            "graph; record the forward again");
        new_recording();
    }
    if (!recording_) return false;
    bool any = has_parameters;
    for (std::size_t i = 0; i < count; ++i) any = any || inputs[i]->recorded();
    return any;
}

template <class T>
Var<T> Tape<T>::constant(std::shared_ptr<const void> keep, TensorView<const T> value) {
    Var<T> v;
    v.tape_ = self_;
    v.recording_ = recording_id_;
    v.keep_ = std::move(keep);
    v.value_ = value;
    return v;
}

template <class T>
Var<T> Tape<T>::record(std::shared_ptr<const void> keep, TensorView<const T> value,
                       Backward backward) {
    HEADWISE_ASSERT(recording_ && !done_);
    Var<T> v = constant(std::move(keep), value);
    Node n;
    n.backward = std::move(backward);
    n.shape = value.shape();
    nodes_.push_back(std::move(n));
    ++live_;
    v.node_ = nodes_.size() - 1;
    return v;
}

template <class T>
void Tape<T>::accumulate(const Var<T>& x, Tensor<T>&& dx) {
    if (!x.recorded()) return;
    Node& n = nodes_[x.node_];
    HEADWISE_ASSERT(dx.shape() == n.shape);
    if (!n.has_grad) {
        n.grad = std::move(dx);
        n.has_grad = true;
    } else if (n.shape.numel() != 0) {
        n.grad.matrix() += dx.matrix();
    }
}

template <class T>
void Tape<T>::backward(const Var<T>& loss) {
    if (loss.value().numel() != 1)
        throw shape_error("headwise::autograd::Tape::backward", "loss",
                          "one element (pass grad_output for any other output)", loss.shape());
    Tensor<T> seed(loss.shape());
    seed.data()[0] = T(1);
    backward(loss, seed);
}

template <class T>
void Tape<T>::backward(const Var<T>& output, TensorView<const T> grad_output) {
    constexpr const char* fn = "headwise::autograd::Tape::backward";
    check_var(fn, "output", output);
    if (done_)
        throw std::invalid_argument(std::string(fn) +
                                    ": output: backward already ran over this recording and "
                                    "freed its saved activations; record the forward again");
    if (!output.recorded())
        throw std::invalid_argument(std::string(fn) +
                                    ": output: was not recorded (no-grad mode, or it depends on "
                                    "no parameter and no input with requires_grad)");
    headwise::detail::check_shape(fn, "grad_output", grad_output.shape(), output.shape());
    done_ = true;
    Tensor<T> seed(grad_output.shape());
    seed.matrix() = grad_output.matrix();
    accumulate(output, std::move(seed));
    // Nodes were recorded after their inputs, so reverse order visits every node after all of
    // its uses: its gradient is complete when its backward runs.
    for (std::size_t i = output.node_ + 1; i-- > 0;) {
        Node& n = nodes_[i];
        if (n.leaf) continue;
        if (!n.has_grad) continue;  // off the path from the output
        const Backward run = std::move(n.backward);
        n.backward = nullptr;
        --live_;
        const Tensor<T> dy = std::move(n.grad);
        n.grad = Tensor<T>();
        n.has_grad = false;
        run(dy);  // the saved activations go with `run`
    }
    // Nodes that backward did not reach (after the output, or off its path) free theirs too.
    for (Node& n : nodes_) {
        if (n.leaf) {
            if (!n.has_grad) n.grad = Tensor<T>(n.shape);  // zeros: no dependence
            n.has_grad = true;
        } else {
            n.backward = nullptr;
            n.grad = Tensor<T>();
            n.has_grad = false;
        }
    }
    live_ = 0;
}

template <class T>
const Tensor<T>& Tape<T>::grad(const Var<T>& x) const {
    constexpr const char* fn = "headwise::autograd::Tape::grad";
    check_var(fn, "x", x);
    if (!x.recorded() || !nodes_[x.node_].leaf)
        throw std::invalid_argument(std::string(fn) +
                                    ": x: is no leaf with requires_grad (tape.input(value, true) "
                                    "on a recording tape)");
    if (!done_) throw std::invalid_argument(std::string(fn) + ": x: backward has not run yet");
    return nodes_[x.node_].grad;
}

/// Switches `tape`'s recording off for a scope and back to what it was on leaving it.
template <class T>
class NoGradGuard {
public:
    explicit NoGradGuard(Tape<T>& tape) : tape_(tape), was_(tape.recording()) {
        tape.set_recording(false);
    }
    ~NoGradGuard() { tape_.set_recording(was_); }
    NoGradGuard(const NoGradGuard&) = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
    Tape<T>& tape_;
    bool was_;
};

}  // namespace headwise::autograd

// Compiled once into headwise::compiled (detail/compiled_templates.hpp);
// not compiled: NoGradGuard (two inline members).
#define HEADWISE_DETAIL_TAPE_TEMPLATES(C, F, T) \
    C(class, autograd::Var<T>)                  \
    C(class, autograd::Tape<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_TAPE_TEMPLATES);
