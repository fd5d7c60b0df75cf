// SPDX-License-Identifier: MIT
// Umbrella header: everything public in headwise.
#pragma once

#include "autograd/functions.hpp"
#include "autograd/sequential.hpp"
#include "autograd/tape.hpp"
#include "bf16.hpp"
#include "compare.hpp"
#include "config.hpp"
#include "error.hpp"
#include "gradcheck.hpp"
#include "init.hpp"
#include "io/npy.hpp"
// Weight files in safetensors format need nlohmann/json (linked by headwise::headwise when CMake
// found it); without it everything else is still here.
#if __has_include(<nlohmann/json.hpp>)
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#endif
#include "layers/attention/multihead_attention.hpp"
#include "layers/attention/options.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/feed_forward_activation.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_norm.hpp"
#include "layers/linear.hpp"
#include "layers/module.hpp"
#include "layers/relu.hpp"
#include "layers/rms_norm.hpp"
#include "layers/swiglu.hpp"
#include "layers/transformer_decoder_layer.hpp"
#include "layers/transformer_encoder_layer.hpp"
// The BERT encoder and the Llama decoder read config.json and safetensors files (nlohmann/json);
// the BERT tokenizer and the sentence-embedding pipeline also need utf8proc (linked by
// headwise::headwise when CMake found it).
#if __has_include(<nlohmann/json.hpp>)
#include "models/bert.hpp"
#include "models/generation.hpp"
#include "models/llama.hpp"
#if __has_include(<utf8proc.h>)
#include "models/sentence_embedding.hpp"
#include "text/wordpiece.hpp"
#endif
#endif
#include "losses/cross_entropy.hpp"
#include "losses/mse.hpp"
#include "losses/reduction.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/blocked_attention.hpp"
#include "ops/cached_attention.hpp"
#include "ops/dropout.hpp"
#include "ops/gemm.hpp"
#include "ops/gemm_bf16.hpp"
#include "ops/layer_norm.hpp"
#include "ops/linear.hpp"
#include "ops/rms_norm.hpp"
#include "ops/rope.hpp"
#include "ops/score_mask.hpp"
#include "ops/softmax.hpp"
#include "ops/swiglu.hpp"
#include "optim/adam.hpp"
#include "optim/clip_grad_norm.hpp"
#include "optim/grad_accumulation.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/schedules.hpp"
#include "optim/sgd.hpp"
#include "precision.hpp"
#include "random.hpp"
#include "shape.hpp"
#include "tensor.hpp"
#include "tensor_ops/concat.hpp"
#include "tensor_ops/elementwise.hpp"
#include "tensor_ops/factories.hpp"
#include "tensor_ops/matmul.hpp"
#include "tensor_ops/permute.hpp"
#include "tensor_ops/reduce.hpp"
#include "version.hpp"
// Last: with headwise::compiled (HEADWISE_COMPILED), the layers' instantiations come from that
// library instead of every translation unit.
#include "extern_templates.hpp"
