// SPDX-License-Identifier: MIT
// SwiGLU<T>: the gated feed-forward block of Llama (LlamaMLP), forward and backward, under
// Hugging Face's parameter names.
#pragma once

#include <memory>     // std::shared_ptr, std::make_shared
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::move

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../detail/precision_check.hpp"
#include "../error.hpp"
#include "../ops/swiglu.hpp"
#include "../precision.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "linear.hpp"
#include "module.hpp"
#include "uninitialized.hpp"

namespace headwise {

/// What SwiGLU::forward keeps for backward in training mode: the input and the two projections.
/// Read only by the layer; users keep it inside SwiGLUForward.
template <class T>
struct SwiGLUActivations {
    Tensor<T> x;     // the input, [..., E]
    Tensor<T> gate;  // g = gate_proj(x), [..., I]
    Tensor<T> up;    // u = up_proj(x), [..., I]
};

/// What SwiGLU::forward returns; keep it until backward (in training mode it holds what backward
/// needs, in eval mode only the output).
template <class T>
struct SwiGLUForward {
    Tensor<T> output;  // the input's shape, [..., E]
    std::shared_ptr<const SwiGLUActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// The SwiGLU feed-forward block (Shazeer 2020, Eq. 6) as Hugging Face's LlamaMLP computes it:
///   y = down_proj(SiLU(gate_proj(x)) ⊙ up_proj(x)),   SiLU(z) = z σ(z),
/// with gate_proj, up_proj: E -> I and down_proj: I -> E headwise Linear layers (bias optional,
/// off as in Llama: mlp_bias = false). Applied to the last axis of an input of any rank >= 1
/// ([..., E] -> [..., E]). Parameters under transformers' names, in its state_dict() order:
/// gate_proj.weight [I, E], up_proj.weight [I, E], down_proj.weight [E, I] (and gate_proj.bias,
/// up_proj.bias, down_proj.bias with a bias), so a Llama checkpoint's model.layers.N.mlp.*
/// entries load with load_state_dict(sd, "model.layers.N.mlp.").
///
/// Saved activations: forward in training mode keeps the input and the two projections g =
/// gate_proj(x) and u = up_proj(x) ([..., E] + 2 [..., I] elements); backward recomputes the
/// gated hidden h = SiLU(g) ⊙ u from them (one elementwise pass, cheap beside the block's three
/// GEMMs) rather than keeping a fourth tensor. The record is owned by the returned SwiGLUForward,
/// so one module may run several forwards before their backwards.
template <class T>
class SwiGLU : public Module<SwiGLU<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::SwiGLU";

    /// The three Linear layers initialised as torch's nn.Linear, drawn from `rng` in
    /// transformers' order: gate_proj, up_proj, down_proj (each weight, then bias). Throws
    /// std::invalid_argument unless both sizes are positive.
    template <class Rng>
    SwiGLU(Index hidden_size, Index intermediate_size, bool bias, Rng& rng);
    /// The same shapes, the weights unwritten (load them before use) and the gradients allocated
    /// on first use (see headwise::uninitialized): for a model loaded from a checkpoint.
    SwiGLU(Index hidden_size, Index intermediate_size, bool bias, uninitialized_t);
    /// Without biases, as Llama (mlp_bias = false).
    template <class Rng>
    SwiGLU(Index hidden_size, Index intermediate_size, Rng& rng)
        : SwiGLU(hidden_size, intermediate_size, false, rng) {}
    SwiGLU(Index hidden_size, Index intermediate_size, uninitialized_t u)
        : SwiGLU(hidden_size, intermediate_size, false, u) {}

    /// x [..., E] -> output [..., E]. In training mode (the default) the result also holds what
    /// backward needs; in eval mode it does not.
    SwiGLUForward<T> forward(TensorView<const T> x) const;
    /// Gradient of sum(output ⊙ dy) with respect to the input of the forward that gave `fwd`;
    /// ADDS every parameter's gradient. Throws std::invalid_argument for the result of an
    /// eval-mode forward, shape_error for dy of another shape than the output (or a result of a
    /// SwiGLU of other sizes), before anything is written.
    Tensor<T> backward(const SwiGLUForward<T>& fwd, TensorView<const T> dy);
    /// The same, ADDING dx into the caller buffer dx (the forward input's shape), e.g. a
    /// residual branch's gradient.
    void backward_into(const SwiGLUForward<T>& fwd, TensorView<const T> dy, TensorView<T> dx);

    /// with_precision (Module): gate_proj, up_proj and down_proj multiply in the chosen format;
    /// SiLU and the gating product stay float.

    Index hidden_size() const noexcept { return E_; }
    Index intermediate_size() const noexcept { return I_; }
    bool has_bias() const noexcept { return gate_proj_.has_bias(); }
    Linear<T>& gate_proj() noexcept { return gate_proj_; }
    const Linear<T>& gate_proj() const noexcept { return gate_proj_; }
    Linear<T>& up_proj() noexcept { return up_proj_; }
    const Linear<T>& up_proj() const noexcept { return up_proj_; }
    Linear<T>& down_proj() noexcept { return down_proj_; }
    const Linear<T>& down_proj() const noexcept { return down_proj_; }

    /// gate_proj, up_proj, down_proj (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("gate_proj", gate_proj_);
        d.child("up_proj", up_proj_);
        d.child("down_proj", down_proj_);
    }

private:
    static Index checked(const char* argument, Index value);
    /// The record of `fwd`, checked to come from a training-mode forward of a SwiGLU of this
    /// module's sizes.
    const SwiGLUActivations<T>& saved_of(const SwiGLUForward<T>& fwd, const char* fn) const;
    void backward_unchecked(const SwiGLUActivations<T>& s, TensorView<const T> dy,
                            TensorView<T> dx);

    Index E_, I_;
    Linear<T> gate_proj_;  // [I, E]
    Linear<T> up_proj_;    // [I, E]
    Linear<T> down_proj_;  // [E, I]
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
Index SwiGLU<T>::checked(const char* argument, Index value) {
    if (value <= 0)
        throw_invalid_argument("headwise::SwiGLU::SwiGLU", argument, "must be positive",
                               std::to_string(value));
    return value;
}

template <class T>
template <class Rng>
SwiGLU<T>::SwiGLU(Index hidden_size, Index intermediate_size, bool bias, Rng& rng)
    : E_(checked("hidden_size", hidden_size)),
      I_(checked("intermediate_size", intermediate_size)),
      gate_proj_(hidden_size, intermediate_size, bias, rng),
      up_proj_(hidden_size, intermediate_size, bias, rng),
      down_proj_(intermediate_size, hidden_size, bias, rng) {}

template <class T>
SwiGLU<T>::SwiGLU(Index hidden_size, Index intermediate_size, bool bias, uninitialized_t u)
    : E_(checked("hidden_size", hidden_size)),
      I_(checked("intermediate_size", intermediate_size)),
      gate_proj_(hidden_size, intermediate_size, bias, u),
      up_proj_(hidden_size, intermediate_size, bias, u),
      down_proj_(intermediate_size, hidden_size, bias, u) {}

template <class T>
SwiGLUForward<T> SwiGLU<T>::forward(TensorView<const T> x) const {
    detail::check_last_dim("headwise::SwiGLU::forward", "input", x.shape(), E_);
    auto s = std::make_shared<SwiGLUActivations<T>>();
    // 1. g = gate_proj(x), u = up_proj(x)                                 [..., I] each
    s->gate = gate_proj_.forward(x);
    s->up = up_proj_.forward(x);
    // 2. h = SiLU(g) ⊙ u                                                  [..., I]
    Tensor<T> h = Tensor<T>::uninitialized(s->gate.shape());
    ops::swiglu_forward(s->gate.data(), s->up.data(), h.numel(), h.data());
    // 3. y = down_proj(h)                                                 [..., E]
    SwiGLUForward<T> f;
    f.output = down_proj_.forward(h);
    if (this->is_training()) {
        s->x = Tensor<T>(x);
        f.saved = std::move(s);
    }
    return f;
}

template <class T>
const SwiGLUActivations<T>& SwiGLU<T>::saved_of(const SwiGLUForward<T>& fwd, const char* fn) const {
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from a forward in eval mode, which saves "
                                    "nothing for backward; call train() before forward");
    const SwiGLUActivations<T>& s = *fwd.saved;
    detail::check_last_dim(fn, "fwd (its input)", s.x.shape(), E_);
    detail::check_last_dim(fn, "fwd (its gate projection)", s.gate.shape(), I_);
    return s;
}

template <class T>
Tensor<T> SwiGLU<T>::backward(const SwiGLUForward<T>& fwd, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::SwiGLU::backward";
    this->check_not_stored(fn);
    detail::check_float_weights(fn, this->float_weights_released(),
                                "backward needs the float weights (the layer is inference-only)");
    const SwiGLUActivations<T>& s = saved_of(fwd, fn);
    detail::check_shape(fn, "grad_output", dy.shape(), s.x.shape());
    Tensor<T> dx(s.x.shape());  // [..., E], zero: backward_unchecked accumulates
    backward_unchecked(s, dy, dx);
    return dx;
}

template <class T>
void SwiGLU<T>::backward_into(const SwiGLUForward<T>& fwd, TensorView<const T> dy,
                              TensorView<T> dx) {
    constexpr const char* fn = "headwise::SwiGLU::backward_into";
    this->check_not_stored(fn);
    detail::check_float_weights(fn, this->float_weights_released(),
                                "backward needs the float weights (the layer is inference-only)");
    const SwiGLUActivations<T>& s = saved_of(fwd, fn);
    detail::check_shape(fn, "grad_output", dy.shape(), s.x.shape());
    detail::check_shape(fn, "grad_input", dx.shape(), s.x.shape());
    backward_unchecked(s, dy, dx);
}

template <class T>
void SwiGLU<T>::backward_unchecked(const SwiGLUActivations<T>& s, TensorView<const T> dy,
                                   TensorView<T> dx) {
    const Index n = s.gate.numel();
    // Forward's steps in reverse.
    // 3. y = down_proj(h): dh = dy W_down, dW_down += dy^T h (h recomputed from g and u).
    Tensor<T> h = Tensor<T>::uninitialized(s.gate.shape());  // [..., I]
    ops::swiglu_forward(s.gate.data(), s.up.data(), n, h.data());
    Tensor<T> dh(s.gate.shape());  // [..., I], zero: backward_into accumulates
    down_proj_.backward_into(h, dy, dh);
    // 2. h = SiLU(g) ⊙ u: dg = dh ⊙ u ⊙ SiLU'(g), du = dh ⊙ SiLU(g). h's buffer becomes du.
    Tensor<T> dg(s.gate.shape());  // [..., I], zero: the kernel accumulates
    Tensor<T>& du = h;             // [..., I]
    du.fill(T(0));
    ops::swiglu_backward(s.gate.data(), s.up.data(), dh.data(), n, dg.data(), du.data());
    // 1. g = gate_proj(x), u = up_proj(x): dx += dg W_gate + du W_up, and their weights'.
    gate_proj_.backward_into(s.x, dg, dx);
    up_proj_.backward_into(s.x, du, dx);
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_SWIGLU_TEMPLATES(C, F, T) \
    C(class, SwiGLU<T>)                           \
    C(struct, SwiGLUActivations<T>)               \
    C(struct, SwiGLUForward<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_SWIGLU_TEMPLATES);
