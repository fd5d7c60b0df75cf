// SPDX-License-Identifier: MIT
// Every header whose templates headwise::compiled holds, for float and double (each names its
// own at its end: detail/compiled_templates.hpp says how and why).
#pragma once

// Including a header of the library is enough: with HEADWISE_COMPILED (defined by the CMake target
// headwise::compiled), each header declares its own compiled templates `extern`, so a program
// compiles only the headers it includes. This header includes all of them: headwise::compiled
// (src/compiled.cpp, src/compiled_double.cpp) and the tests' shared instantiations are built from
// it, and a program that includes it has them all declared.
#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "layers/attention/circuits.hpp"
#include "layers/attention/head_parameters.hpp"
#include "layers/attention/kv_cache.hpp"
#include "layers/attention/multihead_attention.hpp"
#include "layers/attention/options.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_norm.hpp"
#include "layers/layer_scale.hpp"
#include "layers/linear.hpp"
#include "layers/module.hpp"
#include "layers/relu.hpp"
#include "layers/rms_norm.hpp"
#include "layers/swiglu.hpp"
#include "layers/transformer_decoder_layer.hpp"
#include "layers/transformer_encoder_layer.hpp"
#include "layers/weight_matrix.hpp"
#include "optim/adam.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/sgd.hpp"
// The models need nlohmann/json, the sentence embedder utf8proc as well: included when the
// umbrella header includes them (headwise.hpp tests the same).
#if __has_include(<nlohmann/json.hpp>)
#include "models/bert.hpp"
#include "models/generation.hpp"
#include "models/llama.hpp"
#if __has_include(<utf8proc.h>)
#include "models/sentence_embedding.hpp"
#endif
#endif
