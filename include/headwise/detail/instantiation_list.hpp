// SPDX-License-Identifier: MIT
// The one list of the templates compiled once for float and double: extern_templates.hpp declares
// them extern, src/compiled.cpp and the tests' shared library define them.
#pragma once

#include <cstdint>  // std::int64_t
#include <vector>   // std::vector

#include "../autograd/functions.hpp"
#include "../autograd/tape.hpp"
#include "../layers/attention/circuits.hpp"
#include "../layers/attention/head_parameters.hpp"
#include "../layers/attention/kv_cache.hpp"
#include "../layers/attention/multihead_attention.hpp"
#include "../layers/attention/options.hpp"
#include "../layers/dropout.hpp"
#include "../layers/embedding.hpp"
#include "../layers/gelu.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/layer_scale.hpp"
#include "../layers/linear.hpp"
#include "../layers/module.hpp"
#include "../layers/relu.hpp"
#include "../layers/rms_norm.hpp"
#include "../layers/swiglu.hpp"
#include "../layers/transformer_decoder_layer.hpp"
#include "../layers/transformer_encoder_layer.hpp"
#include "../layers/weight_matrix.hpp"
#include "../optim/adam.hpp"
#include "../optim/lr_scheduler.hpp"
#include "../optim/sgd.hpp"
// The models need nlohmann/json, the sentence embedder utf8proc as well: listed when the umbrella
// header includes them (headwise.hpp tests the same).
#if __has_include(<nlohmann/json.hpp>)
#define HEADWISE_DETAIL_INSTANTIATE_MODELS 1
#include "../models/bert.hpp"
#include "../models/generation.hpp"
#include "../models/llama.hpp"
#if __has_include(<utf8proc.h>)
#define HEADWISE_DETAIL_INSTANTIATE_TEXT_MODELS 1
#include "../models/sentence_embedding.hpp"
#endif
#endif

// How to read it: HEADWISE_INSTANTIATION_CLASSES(X, T) calls X(class-key, type) for each class
// template instantiated with the scalar T (the key as the template declares it: clang warns of a
// mismatch), HEADWISE_INSTANTIATION_FUNCTIONS(X, T) calls
// X(return type, name, (parameter types)) for each function template; names are relative to
// namespace headwise, and each user expands the lists there, once with float and once with
// double:
//
//   #define MY_CLASS(key, type) extern template key type;
//   namespace headwise { HEADWISE_INSTANTIATION_CLASSES(MY_CLASS, float) }
//
// One line per template, so that a new module is one new line: X(class, Name<T>).
// tests/instantiation_list.cmake fails when a `template <class T> class|struct Name` of layers/,
// layers/attention/, optim/, autograd/ or models/ is named by no line here and by no "not listed:"
// line below.
//
// Why every member compiles for both scalars: an explicit instantiation definition compiles every
// non-template member, so a member that only works for float must refuse double at run time
// (as with_precision(Precision::bf16) does), not with a static_assert.
//
// Not listed, on purpose:
//   not listed: Module            the CRTP base: its members are defined in the class (inline)
//   not listed: Sequential        variadic, over the user's own modules
//   not listed: Residual          over the user's own module
//   not listed: NoGradGuard       two inline members
//   not listed: LRScheduler       listed per optimiser below (it takes the optimiser, not T)
//   not listed: apply             autograd::apply(module, x, ...) deduces the module type and
//                                 its extra arguments, so its instantiations are the user's;
//                                 the modules' forward and backward it calls are listed
#define HEADWISE_INSTANTIATION_CLASSES(X, T)          \
    X(struct, Parameter<T>)                           \
    X(class, WeightMatrix<T>)                         \
    X(class, Linear<T>)                               \
    X(class, LayerScale<T>)                           \
    X(class, LayerNorm<T>)                            \
    X(class, RMSNorm<T>)                              \
    X(class, SwiGLU<T>)                               \
    X(struct, SwiGLUActivations<T>)                   \
    X(struct, SwiGLUForward<T>)                       \
    X(class, Embedding<T>)                            \
    X(class, Dropout<T>)                              \
    X(struct, DropoutForward<T>)                      \
    X(class, GELU<T>)                                 \
    X(class, ReLU<T>)                                 \
    X(class, MultiheadAttention<T>)                   \
    X(struct, AttentionForward<T>)                    \
    X(struct, AttentionGradients<T>)                  \
    X(struct, AttentionMasks<T>)                      \
    X(class, HeadParameters<T>)                       \
    X(class, KVCache<T>)                              \
    X(class, FactoredMatrix<T>)                       \
    X(struct, QKCircuit<T>)                           \
    X(struct, OVCircuit<T>)                           \
    X(class, TransformerEncoderLayer<T>)              \
    X(struct, TransformerEncoderLayerActivations<T>)  \
    X(struct, TransformerEncoderLayerForward<T>)      \
    X(class, TransformerDecoderLayer<T>)              \
    X(struct, TransformerDecoderLayerActivations<T>)  \
    X(struct, TransformerDecoderLayerForward<T>)      \
    X(struct, TransformerDecoderLayerGradients<T>)    \
    X(class, SGD<T>)                                  \
    X(struct, AdamState<T>)                           \
    X(class, AdamBase<T>)                             \
    X(class, Adam<T>)                                 \
    X(class, AdamW<T>)                                \
    X(class, LRScheduler<SGD<T>>)                     \
    X(class, LRScheduler<Adam<T>>)                    \
    X(class, LRScheduler<AdamW<T>>)                   \
    X(class, autograd::Var<T>)                        \
    X(class, autograd::Tape<T>)                       \
    HEADWISE_DETAIL_INSTANTIATION_MODEL_CLASSES(X, T) \
    HEADWISE_DETAIL_INSTANTIATION_TEXT_CLASSES(X, T)

#define HEADWISE_INSTANTIATION_FUNCTIONS(X, T)                                               \
    X(autograd::Var<T>, autograd::add, (const autograd::Var<T>&, const autograd::Var<T>&))   \
    X(autograd::Var<T>, autograd::reshape, (const autograd::Var<T>&, const Shape&))          \
    X(autograd::Var<T>, autograd::concat_last, (const std::vector<autograd::Var<T>>&))       \
    X(autograd::Var<T>, autograd::cross_entropy,                                             \
      (const autograd::Var<T>&, TensorView<const std::int64_t>, const CrossEntropyOptions&)) \
    X(autograd::Var<T>, autograd::mse_loss,                                                  \
      (const autograd::Var<T>&, TensorView<const T>, Reduction))                             \
    X(autograd::Var<T>, autograd::attention,                                                 \
      (MultiheadAttention<T>&, const autograd::Var<T>&, const autograd::Var<T>&,             \
       const autograd::Var<T>&, const AttentionMasks<T>&))                                   \
    X(autograd::Var<T>, autograd::apply,                                                     \
      (Embedding<T>&, autograd::Tape<T>&, TensorView<const std::int64_t>))                   \
    HEADWISE_DETAIL_INSTANTIATION_MODEL_FUNCTIONS(X, T)

#if defined(HEADWISE_DETAIL_INSTANTIATE_MODELS)
#define HEADWISE_DETAIL_INSTANTIATION_MODEL_CLASSES(X, T) \
    X(class, models::BertLayer<T>)                        \
    X(class, models::BertModel<T>)                        \
    X(class, models::LlamaDecoderLayer<T>)                \
    X(struct, models::LlamaCache<T>)                      \
    X(class, models::LlamaModel<T>)                       \
    X(class, models::LlamaForCausalLM<T>)
#define HEADWISE_DETAIL_INSTANTIATION_MODEL_FUNCTIONS(X, T)                         \
    X(std::vector<std::vector<std::int64_t>>, models::generate,                     \
      (models::LlamaForCausalLM<T>&, const std::vector<std::vector<std::int64_t>>&, \
       const models::GenerationOptions&))
#else
#define HEADWISE_DETAIL_INSTANTIATION_MODEL_CLASSES(X, T)
#define HEADWISE_DETAIL_INSTANTIATION_MODEL_FUNCTIONS(X, T)
#endif

#if defined(HEADWISE_DETAIL_INSTANTIATE_TEXT_MODELS)
#define HEADWISE_DETAIL_INSTANTIATION_TEXT_CLASSES(X, T) X(class, models::SentenceEmbedder<T>)
#else
#define HEADWISE_DETAIL_INSTANTIATION_TEXT_CLASSES(X, T)
#endif

// The three expansions: a declaration or a definition of each class and function, for T.
#define HEADWISE_DETAIL_EXTERN_CLASS(key, type) extern template key type;
#define HEADWISE_DETAIL_EXTERN_FUNCTION(result, name, parameters) \
    extern template result name parameters;
#define HEADWISE_DETAIL_DEFINE_CLASS(key, type) template key type;
#define HEADWISE_DETAIL_DEFINE_FUNCTION(result, name, parameters) template result name parameters;

/// Inside namespace headwise: `extern template` of every listed template, float and double.
#define HEADWISE_DECLARE_INSTANTIATIONS()                                    \
    HEADWISE_INSTANTIATION_CLASSES(HEADWISE_DETAIL_EXTERN_CLASS, float)      \
    HEADWISE_INSTANTIATION_CLASSES(HEADWISE_DETAIL_EXTERN_CLASS, double)     \
    HEADWISE_INSTANTIATION_FUNCTIONS(HEADWISE_DETAIL_EXTERN_FUNCTION, float) \
    HEADWISE_INSTANTIATION_FUNCTIONS(HEADWISE_DETAIL_EXTERN_FUNCTION, double)
/// Inside namespace headwise, in one translation unit per scalar T (float, double): their
/// explicit instantiation definitions (two files build in parallel).
#define HEADWISE_DEFINE_INSTANTIATIONS(T)                           \
    HEADWISE_INSTANTIATION_CLASSES(HEADWISE_DETAIL_DEFINE_CLASS, T) \
    HEADWISE_INSTANTIATION_FUNCTIONS(HEADWISE_DETAIL_DEFINE_FUNCTION, T)
