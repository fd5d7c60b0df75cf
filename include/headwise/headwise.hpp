// SPDX-License-Identifier: MIT
// Umbrella header: everything public in headwise.
#pragma once

#include "compare.hpp"
#include "config.hpp"
#include "error.hpp"
#include "gradcheck.hpp"
#include "init.hpp"
#include "io/npy.hpp"
#include "layers/linear.hpp"
#include "ops/linear.hpp"
#include "ops/softmax.hpp"
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
