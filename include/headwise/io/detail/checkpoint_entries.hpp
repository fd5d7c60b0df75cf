// SPDX-License-Identifier: MIT
// The entry names of a checkpoint file and the 16-bit pieces that carry integers through it
// (io/checkpoint.hpp).
#pragma once

#include <cstdint>    // std::uint64_t
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::to_string, std::char_traits
#include <vector>     // std::vector

#include "../../config.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"

namespace headwise::io::detail::checkpoint {

inline constexpr const char* kModel = "model.";
inline constexpr const char* kOptimiser = "optim.";
inline constexpr const char* kScheduler = "sched.";
inline constexpr const char* kStep = "step";
inline constexpr const char* kModelRandom = "random.model";
inline constexpr const char* kIntegers = "int.";

inline bool starts_with(const std::string& s, const char* prefix) {
    return s.compare(0, std::char_traits<char>::length(prefix), prefix) == 0;
}

/// An entry name as error messages show it: a file's names can be long, so at most 64 bytes.
inline std::string shown(const std::string& name) {
    return name.size() <= 64 ? name : name.substr(0, 64) + "...";
}

/// [n, 4]: word i's bits 16k..16k+15 at (i, k). Each piece is below 2^16, so float holds it.
template <class T>
Tensor<T> pieces(const std::vector<std::uint64_t>& words) {
    Tensor<T> t(Shape{static_cast<Index>(words.size()), 4});
    for (std::size_t i = 0; i < words.size(); ++i)
        for (int k = 0; k < 4; ++k)
            t.data()[4 * i + static_cast<std::size_t>(k)] =
                static_cast<T>((words[i] >> (16 * k)) & 0xFFFFu);
    return t;
}

/// The words of pieces(), checked: [n, 4] of whole numbers in [0, 65535].
template <class T>
std::vector<std::uint64_t> words(const Tensor<T>& t, const std::string& path,
                                 const std::string& name) {
    const std::string where =
        "headwise::io::load_checkpoint: " + path + ": entry '" + shown(name) + "'";
    if (t.rank() != 2 || t.shape()[1] != 4)
        throw std::runtime_error(where + ": expected shape [n, 4] (16-bit pieces), got " +
                                 t.shape().str());
    std::vector<std::uint64_t> out(static_cast<std::size_t>(t.shape()[0]));
    for (std::size_t i = 0; i < out.size(); ++i)
        for (std::size_t k = 0; k < 4; ++k) {
            const T piece = t.data()[4 * i + k];
            if (!(piece >= T(0) && piece <= T(65535) &&
                  static_cast<T>(static_cast<int>(piece)) == piece))
                throw std::runtime_error(where + ": element (" + std::to_string(i) + ", " +
                                         std::to_string(k) +
                                         ") is not a 16-bit piece (a whole number in [0, 65535])");
            out[i] |= static_cast<std::uint64_t>(piece) << (16 * k);
        }
    return out;
}

}  // namespace headwise::io::detail::checkpoint
