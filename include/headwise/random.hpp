// SPDX-License-Identifier: MIT
// Explicit random generators, the few distributions the library draws from, and generator states
// as integers (for checkpoints).
#pragma once

#include <cmath>        // std::sqrt, std::log, std::cos
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <random>       // std::mt19937_64
#include <sstream>      // std::ostringstream, std::istringstream
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::false_type, std::true_type, std::void_t
#include <vector>       // std::vector

#include "detail/rng_traits.hpp"

namespace headwise {

/// The generator type used throughout: a standard 64-bit Mersenne twister, always passed
/// explicitly. There is no global generator anywhere in the library.
using Generator = std::mt19937_64;

/// Uniform double in [0, 1) from the top 53 bits of one draw. Written out (rather than
/// std::uniform_real_distribution) so that a seed gives the same numbers with every standard
/// library.
template <class Rng>
double uniform01(Rng& rng) {
    static_assert(Rng::max() - Rng::min() == ~std::uint64_t{0},
                  "headwise: pass a generator with 64 random bits per draw, e.g. std::mt19937_64");
    return static_cast<double>((rng() - Rng::min()) >> 11) * 0x1.0p-53;
}

/// One uniform double in [lo, hi) (the tensor factory of the same distribution is
/// uniform<T>(shape, lo, hi, rng) in tensor_ops/factories.hpp).
template <class Rng>
double uniform_scalar(Rng& rng, double lo, double hi) {
    return lo + (hi - lo) * uniform01(rng);
}

/// Standard normal draw by the Box-Muller transform (one draw per call; the sine partner is
/// discarded so the stream has no hidden state beyond the generator).
template <class Rng>
double normal(Rng& rng) {
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log is finite
    const double u2 = uniform01(rng);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

/// Bernoulli(p) draw: true with probability p.
template <class Rng>
bool bernoulli(Rng& rng, double p) {
    return uniform01(rng) < p;
}

/// The whole state of a standard engine as integers (for mt19937_64, its 312 state words and its
/// position), so that a training run can save where its generators are and continue from there:
/// set_generator_state(g, generator_state(g)) leaves g drawing the same numbers. The words are the
/// engine's standard textual representation read as numbers, hence valid with the standard
/// library that wrote them.
template <class Rng>
std::vector<std::uint64_t> generator_state(const Rng& rng) {
    std::ostringstream text;
    text << rng;
    std::istringstream in(text.str());
    std::vector<std::uint64_t> words;
    for (std::uint64_t w; in >> w;) words.push_back(w);
    return words;
}

/// Restores a state from generator_state(). Throws std::invalid_argument naming `argument` when
/// the words are not a state of this engine (wrong count or values); `rng` is then unchanged.
template <class Rng>
void set_generator_state(Rng& rng, const std::vector<std::uint64_t>& words,
                         const std::string& function = "headwise::set_generator_state",
                         const std::string& argument = "words") {
    const std::size_t expected = generator_state(rng).size();
    if (words.size() != expected)
        throw std::invalid_argument(
            function + ": " + argument + ": expected " + std::to_string(expected) +
            " words (the generator's state), got " + std::to_string(words.size()));
    // A Mersenne twister's text may end with its position in the state (libstdc++ writes it),
    // which the engine reads unchecked and then indexes with.
    if constexpr (detail::has_state_size<Rng>::value)
        if (words.size() == Rng::state_size + 1 && words.back() > Rng::state_size)
            throw std::invalid_argument(function + ": " + argument + ": position " +
                                        std::to_string(words.back()) + " past the state's " +
                                        std::to_string(Rng::state_size) + " words");
    std::ostringstream text;
    for (std::size_t i = 0; i < words.size(); ++i) text << (i ? " " : "") << words[i];
    std::istringstream in(text.str());
    Rng restored;
    in >> restored;
    if (in.fail())
        throw std::invalid_argument(function + ": " + argument +
                                    ": not a state of this generator (the engine rejected it)");
    rng = restored;
}

}  // namespace headwise
