// SPDX-License-Identifier: MIT
// HeadParameters<T>: one head's slices of a MultiheadAttention's in-projection, as views.
#pragma once

#include "../../config.hpp"
#include "../../detail/compiled_templates.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "detail/in_proj_layout.hpp"

namespace headwise {

template <class T>
class MultiheadAttention;

/// Head i's slices of the in-projection, as views into the packed parameters (no copy):
/// W_i^Q [D, E], W_i^K [D, kdim], W_i^V [D, vdim] in PyTorch's (out, in) layout, so that
/// Q_i = X W_i^Q^T + b_i^Q. The paper's W_i^Q (E x D) is the transpose of q_weight().
/// HeadParameters<T> (from a non-const module) writes through to the module's parameters;
/// HeadParameters<const T> (from a const module) only reads. Bias views are empty without bias.
template <class T>
class HeadParameters {
public:
    TensorView<T> q_weight() const { return weight(w_, detail::kQuery); }
    TensorView<T> k_weight() const { return weight(w_, detail::kKey); }
    TensorView<T> v_weight() const { return weight(w_, detail::kValue); }
    TensorView<T> q_bias() const { return bias(b_, detail::kQuery); }
    TensorView<T> k_bias() const { return bias(b_, detail::kKey); }
    TensorView<T> v_bias() const { return bias(b_, detail::kValue); }
    TensorView<T> q_weight_grad() const { return weight(gw_, detail::kQuery); }
    TensorView<T> k_weight_grad() const { return weight(gw_, detail::kKey); }
    TensorView<T> v_weight_grad() const { return weight(gw_, detail::kValue); }
    TensorView<T> q_bias_grad() const { return bias(gb_, detail::kQuery); }
    TensorView<T> k_bias_grad() const { return bias(gb_, detail::kKey); }
    TensorView<T> v_bias_grad() const { return bias(gb_, detail::kValue); }

private:
    template <class>
    friend class MultiheadAttention;  // the only maker: it owns the parameters viewed
    HeadParameters(T* w, T* b, T* gw, T* gb, const detail::InProjLayout& layout, Index i)
        : w_(w), b_(b), gw_(gw), gb_(gb), layout_(layout), i_(i) {}

    // Query head i reads key/value head layout_.kv_head(i): one block for the whole group.
    Index head_of(int input) const noexcept {
        return input == detail::kQuery ? i_ : layout_.kv_head(i_);
    }
    TensorView<T> weight(T* base, int input) const {
        return view(base + layout_.weight_offset(input, head_of(input)),
                    Shape{layout_.D, layout_.in(input)});
    }
    TensorView<T> bias(T* base, int input) const {
        if (!base) return {};
        return view(base + layout_.bias_offset(input, head_of(input)), Shape{layout_.D});
    }

    T *w_, *b_, *gw_, *gb_;
    detail::InProjLayout layout_;
    Index i_;
};

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_HEAD_PARAMETERS_TEMPLATES(C, F, T) C(class, HeadParameters<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_HEAD_PARAMETERS_TEMPLATES);
