// SPDX-License-Identifier: MIT
// The library version; CMake reads the project version from the three numeric macros below.
#pragma once

#define HEADWISE_VERSION_MAJOR 0
#define HEADWISE_VERSION_MINOR 1
#define HEADWISE_VERSION_PATCH 0

// "MAJOR.MINOR.PATCH"; the build checks that it agrees with the numbers above.
#define HEADWISE_VERSION_STRING "0.1.0"

// One integer for preprocessor comparisons: MAJOR * 10000 + MINOR * 100 + PATCH.
#define HEADWISE_VERSION \
    (HEADWISE_VERSION_MAJOR * 10000 + HEADWISE_VERSION_MINOR * 100 + HEADWISE_VERSION_PATCH)
