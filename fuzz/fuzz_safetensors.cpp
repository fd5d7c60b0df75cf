// SPDX-License-Identifier: MIT
// libFuzzer target for the safetensors reader, fed raw bytes (scripts/test.sh passes it the
// header's JSON tokens in fuzz/safetensors.dict): any bytes either load or throw a short, clear
// error, and what loads saves and loads back bit for bit.
#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint8_t

#include "safetensors_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    headwise_fuzz::check(data, size);
    return 0;
}
