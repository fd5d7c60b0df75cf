// SPDX-License-Identifier: MIT
// The ggml tensor types (the type ids of GGUF files): their names, and the block layout of the
// ones headwise reads (values per block, bytes per block).
#pragma once

#include <cstdint>    // std::uint32_t, std::uint64_t
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string

#include "../config.hpp"

namespace headwise::quant {

// ---- declarations ----------------------------------------------------------------------------

/// The tensor types headwise reads, with their ggml type ids (the numbers GGUF files store).
/// Every type stores a row as consecutive blocks of `block_size` values; the float types have
/// blocks of one value. A value of another id may be held in a Type (it is a 32-bit number):
/// is_readable() tells them apart.
enum class Type : std::uint32_t {
    f32 = 0,    // IEEE float, 4 bytes
    f16 = 1,    // IEEE half, 2 bytes
    q4_0 = 2,   // 32 values: half d, 16 bytes of 4-bit q;            x = d (q - 8)
    q4_1 = 3,   // 32 values: half d, half m, 16 bytes of 4-bit q;    x = d q + m
    q5_0 = 6,   // 32 values: half d, 4 bytes of 5th bits, 16 of 4;  x = d (q - 16)
    q5_1 = 7,   // 32 values: half d, half m, 4 + 16 bytes;          x = d q + m
    q8_0 = 8,   // 32 values: half d, 32 int8 q;                     x = d q
    q4_k = 12,  // 256 values: 8 sub-blocks of 32 with 6-bit scales and minima (k_quants.hpp)
    q6_k = 14,  // 256 values: 16 sub-blocks of 16 with int8 scales, 6-bit q (k_quants.hpp)
    bf16 = 30,  // bfloat16, 2 bytes
};

/// Values per block of the 32-value formats (ggml's QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0).
inline constexpr Index kBlock32 = 32;
/// Values per block of the K-quants (ggml's QK_K), a "super-block".
inline constexpr Index kBlockK = 256;

/// What a row of a type looks like in memory.
struct BlockFormat {
    Type type;
    const char* name;   // ggml's name: "Q4_K"
    Index block_size;   // values per block
    Index block_bytes;  // bytes per block
    bool quantizable;   // quantize.hpp writes it from float
};

/// True for the types headwise reads (the enumerators of Type).
constexpr bool is_readable(std::uint32_t id) noexcept;

/// The layout of a readable type; throws std::invalid_argument naming `function` and the id
/// for any other.
BlockFormat block_format(Type type, const char* function = "headwise::quant::block_format");

/// ggml's name of any type id, readable or not ("IQ2_XS" for 16, "Q4_2" for the retired 4), or
/// nullptr when ggml never had a type of that id.
constexpr const char* ggml_type_name(std::uint32_t id) noexcept;

/// "IQ2_XS (16)", or "unknown (99)" for an id ggml never had: how messages name a type id.
std::string describe_type(std::uint32_t id);

/// The readable types as messages list them: "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
/// Q4_K, Q6_K".
constexpr const char* readable_types() noexcept;

/// Bytes of a row of `n` values of `type`; throws std::invalid_argument naming `function` when
/// `n` is negative or not a multiple of the block size.
std::uint64_t row_bytes(Type type, Index n, const char* function = "headwise::quant::row_bytes");

// ---- definitions -----------------------------------------------------------------------------

constexpr bool is_readable(std::uint32_t id) noexcept {
    switch (static_cast<Type>(id)) {
        case Type::f32:
        case Type::f16:
        case Type::q4_0:
        case Type::q4_1:
        case Type::q5_0:
        case Type::q5_1:
        case Type::q8_0:
        case Type::q4_k:
        case Type::q6_k:
        case Type::bf16:
            return true;
    }
    return false;
}

constexpr const char* ggml_type_name(std::uint32_t id) noexcept {
    // ggml.h's enum ggml_type; ids it has retired keep their old names, since files of the time
    // carry them.
    constexpr const char* kNames[] = {
        "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
        "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
        "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
        "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
        "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
        "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0"};
    return id < sizeof kNames / sizeof kNames[0] ? kNames[id] : nullptr;
}

inline std::string describe_type(std::uint32_t id) {
    const char* name = ggml_type_name(id);
    return std::string(name ? name : "unknown") + " (" + std::to_string(id) + ")";
}

constexpr const char* readable_types() noexcept {
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K";
}

inline BlockFormat block_format(Type type, const char* function) {
    switch (type) {
        case Type::f32:
            return {type, "F32", 1, 4, true};
        case Type::f16:
            return {type, "F16", 1, 2, true};
        case Type::bf16:
            return {type, "BF16", 1, 2, true};
        case Type::q4_0:
            return {type, "Q4_0", kBlock32, 18, true};
        case Type::q4_1:
            return {type, "Q4_1", kBlock32, 20, true};
        case Type::q5_0:
            return {type, "Q5_0", kBlock32, 22, true};
        case Type::q5_1:
            return {type, "Q5_1", kBlock32, 24, true};
        case Type::q8_0:
            return {type, "Q8_0", kBlock32, 34, true};
        case Type::q4_k:
            return {type, "Q4_K", kBlockK, 144, true};
        case Type::q6_k:
            return {type, "Q6_K", kBlockK, 210, true};
    }
    throw std::invalid_argument(std::string(function) + ": type " +
                                describe_type(static_cast<std::uint32_t>(type)) +
                                " is not one headwise reads (" + readable_types() + ")");
}

inline std::uint64_t row_bytes(Type type, Index n, const char* function) {
    const BlockFormat f = block_format(type, function);
    if (n < 0 || n % f.block_size != 0)
        throw std::invalid_argument(std::string(function) + ": a row of " + f.name +
                                    " holds a multiple of " + std::to_string(f.block_size) +
                                    " values, not " + std::to_string(n));
    return static_cast<std::uint64_t>(n / f.block_size) * static_cast<std::uint64_t>(f.block_bytes);
}

}  // namespace headwise::quant
