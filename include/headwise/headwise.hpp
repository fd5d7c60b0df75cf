// SPDX-License-Identifier: MIT
// Umbrella header: everything public in headwise.
#pragma once

#include "config.hpp"
#include "error.hpp"
#include "random.hpp"
#include "shape.hpp"
#include "tensor.hpp"
#include "version.hpp"
