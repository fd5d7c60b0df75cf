// SPDX-License-Identifier: MIT
// module_traits<M>: which backward convention a module follows, so that apply() can record it.
#pragma once

#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <tuple>        // std::tie, std::tuple_size
#include <type_traits>  // std::enable_if_t, std::is_same_v, std::void_t, std::decay_t
#include <utility>      // std::declval, std::index_sequence

#include "../layers/attention/multihead_attention.hpp"
#include "../layers/transformer_decoder_layer.hpp"
#include "../tensor.hpp"

namespace headwise::autograd {

/// How a module's backward is called (what apply() saves and hands back to it):
///   on_input     Tensor<T> forward(x);            Tensor<T> backward(x, dy)    (the input again)
///   record       R forward(x, extra...);          Tensor<T> backward(const R&, dy)
///                R has a member `output` (the value).
///   gradients    R forward(x_1, ..., x_N, extra...);  G backward(const R&, dy)
///                G is a struct of N input gradients that gradient_fields<G> names in order.
///   none         none of these: apply() does not take the module.
enum class BackwardConvention { none, on_input, record, gradients };

/// The gradient struct of a `gradients` module, as a tuple of references in the order of the
/// forward's tensor arguments, with their names (used in error messages):
///
///   template <class T> struct gradient_fields<MyGradients<T>> {
///       static constexpr const char* names[] = {"tgt", "memory"};
///       static auto tie(MyGradients<T>& g) { return std::tie(g.tgt, g.memory); }
///   };
///
/// Specialise it for a module's own gradients struct; the library's are below.
template <class G, class = void>
struct gradient_fields {
    static constexpr bool defined = false;
};

template <class T>
struct gradient_fields<AttentionGradients<T>> {
    static constexpr bool defined = true;
    static constexpr const char* names[] = {"query", "key", "value"};
    static auto tie(AttentionGradients<T>& g) { return std::tie(g.query, g.key, g.value); }
};

template <class T>
struct gradient_fields<TransformerDecoderLayerGradients<T>> {
    static constexpr bool defined = true;
    static constexpr const char* names[] = {"tgt", "memory"};
    static auto tie(TransformerDecoderLayerGradients<T>& g) { return std::tie(g.tgt, g.memory); }
};

namespace detail {

template <class G, class = void>
struct has_gradient_fields : std::false_type {};
template <class G>
struct has_gradient_fields<G, std::enable_if_t<gradient_fields<G>::defined>> : std::true_type {};

template <class G>
constexpr std::size_t gradient_count() {
    return std::tuple_size<decltype(gradient_fields<G>::tie(std::declval<G&>()))>::value;
}

template <class R, class = void>
struct has_output : std::false_type {};
template <class R>
struct has_output<R, std::void_t<decltype(std::declval<const R&>().output)>> : std::true_type {};

/// A record holding saved activations (`saved`): the module must be in training mode to record.
template <class R, class = void>
struct has_saved : std::false_type {};
template <class R>
struct has_saved<R, std::void_t<decltype(std::declval<R&>().saved.reset())>> : std::true_type {};

template <class M, class = void>
struct has_is_training : std::false_type {};
template <class M>
struct has_is_training<M, std::void_t<decltype(bool(std::declval<const M&>().is_training()))>>
    : std::true_type {};

template <class M, class = void>
struct has_parameter_count : std::false_type {};
template <class M>
struct has_parameter_count<M, std::void_t<decltype(std::declval<const M&>().parameter_count())>>
    : std::true_type {};

/// The view type `I` repeated: the forward's N tensor arguments.
template <std::size_t I, class V>
using repeat_t = V;

/// decltype(m.forward(V x N, Extra...)), or void when that call is ill-formed.
template <class Seq, class M, class V, class = void, class... Extra>
struct forward_call {
    using type = void;
};
template <std::size_t... I, class M, class V, class... Extra>
struct forward_call<std::index_sequence<I...>, M, V,
                    std::void_t<decltype(std::declval<M&>().forward(
                        std::declval<repeat_t<I, V>>()..., std::declval<Extra>()...))>,
                    Extra...> {
    using type = decltype(std::declval<M&>().forward(std::declval<repeat_t<I, V>>()...,
                                                     std::declval<Extra>()...));
};
template <std::size_t N, class M, class V, class... Extra>
using forward_result_t =
    typename forward_call<std::make_index_sequence<N>, M, V, void, Extra...>::type;

/// decltype(m.backward(A, B)), or void when ill-formed.
template <class M, class A, class B, class = void>
struct backward_call {
    using type = void;
};
template <class M, class A, class B>
struct backward_call<
    M, A, B,
    std::void_t<decltype(std::declval<M&>().backward(std::declval<A>(), std::declval<B>()))>> {
    using type = decltype(std::declval<M&>().backward(std::declval<A>(), std::declval<B>()));
};
template <class M, class A, class B>
using backward_result_t = typename backward_call<M, A, B>::type;

}  // namespace detail

/// What apply() knows of module M called on N tensors (Vars) followed by the non-tensor
/// arguments Extra (masks, ...): `convention` (none when M does not fit), `value_type` T,
/// `Record` (what forward returns) and `inputs`, the number of tensors its forward takes
/// (N, or for a `gradients` module called on one Var, its gradient count: that Var is passed
/// as every input, e.g. self-attention's query, key and value).
template <class M, std::size_t N, class... Extra>
struct module_traits {
private:
    template <class U, class = void>
    struct scalar_of {
        using type = void;
    };
    template <class U>
    struct scalar_of<U, std::void_t<typename U::value_type>> {
        using type = typename U::value_type;
    };

public:
    using value_type = typename scalar_of<M>::type;

private:
    using V = TensorView<const std::conditional_t<std::is_void_v<value_type>, float, value_type>>;

    // The convention for exactly K tensor arguments.
    template <std::size_t K>
    struct with {
        using Record = std::decay_t<detail::forward_result_t<K, M, V, Extra...>>;
        // (int stands in for a forward that does not exist: no reference to void is formed)
        using Back = std::decay_t<detail::backward_result_t<
            M, const std::conditional_t<std::is_void_v<Record>, int, Record>&, V>>;
        static constexpr BackwardConvention convention() {
            if constexpr (std::is_void_v<value_type> || std::is_void_v<Record>) {
                return BackwardConvention::none;
            } else if constexpr (detail::has_output<Record>::value) {
                if constexpr (K == 1 && std::is_same_v<Back, Tensor<value_type>>) {
                    return BackwardConvention::record;
                } else if constexpr (detail::has_gradient_fields<Back>::value) {
                    if constexpr (detail::gradient_count<Back>() == K)
                        return BackwardConvention::gradients;
                    else
                        return BackwardConvention::none;
                } else {
                    return BackwardConvention::none;
                }
            } else if constexpr (K == 1 && sizeof...(Extra) == 0 &&
                                 std::is_same_v<Record, Tensor<value_type>> &&
                                 std::is_same_v<std::decay_t<detail::backward_result_t<M, V, V>>,
                                                Tensor<value_type>>) {
                return BackwardConvention::on_input;
            } else {
                return BackwardConvention::none;
            }
        }
    };

    // One Var: the first K in 1..4 that fits (a gradients module takes it as each input).
    static constexpr std::size_t pick() {
        if constexpr (N != 1) {
            return N;
        } else if constexpr (with<1>::convention() != BackwardConvention::none) {
            return 1;
        } else if constexpr (with<2>::convention() == BackwardConvention::gradients) {
            return 2;
        } else if constexpr (with<3>::convention() == BackwardConvention::gradients) {
            return 3;
        } else if constexpr (with<4>::convention() == BackwardConvention::gradients) {
            return 4;
        } else {
            return 1;
        }
    }

public:
    static constexpr std::size_t inputs = pick();
    using Record = typename with<inputs>::Record;
    static constexpr BackwardConvention convention = with<inputs>::convention();
    /// The forward saves activations (its record has `saved`): a recording tape needs the
    /// module in training mode, and off the tape the activations are dropped at once.
    static constexpr bool saves_activations = [] {
        if constexpr (convention == BackwardConvention::record ||
                      convention == BackwardConvention::gradients)
            return detail::has_saved<Record>::value;
        else
            return false;
    }();
};

}  // namespace headwise::autograd
