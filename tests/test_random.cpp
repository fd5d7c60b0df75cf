// SPDX-License-Identifier: MIT
// Tests of headwise/random.hpp: the generator type and the draws it feeds, pinned per seed.
#include <headwise/random.hpp>

#include <cmath>        // std::abs, std::sqrt, std::ldexp, std::log, std::cos, std::isfinite
#include <cstdint>      // std::uint64_t
#include <random>       // std::mt19937_64
#include <type_traits>  // std::is_same_v

#include "support/catch.hpp"

namespace test_random {

namespace {

/// A "generator" that always returns the same value.
struct Fixed {
    std::uint64_t value;
    static constexpr std::uint64_t min() { return 0; }
    static constexpr std::uint64_t max() { return ~std::uint64_t{0}; }
    std::uint64_t operator()() { return value; }
};

}  // namespace

TEST_CASE("the generator is the standard 64-bit Mersenne twister", "[random]") {
    STATIC_REQUIRE(std::is_same_v<headwise::Generator, std::mt19937_64>);
    // The C++ standard pins the 10000th draw of a default-constructed mt19937_64.
    headwise::Generator g;
    for (int i = 0; i < 9999; ++i) g();
    CHECK(g() == 9981545732273789042ull);
}

TEST_CASE("uniform01 is the top 53 bits of one draw, scaled to the unit interval", "[random]") {
    headwise::Generator rng(42), raw(42);
    for (int i = 0; i < 100; ++i) {
        const std::uint64_t bits = raw();
        const double expected = std::ldexp(static_cast<double>(bits >> 11), -53);
        CAPTURE(i, bits);
        REQUIRE(headwise::uniform01(rng) == expected);
    }
    // Pinned, so that a change of the stream is noticed (results of saved seeds would change).
    headwise::Generator pinned(42);
    CHECK(headwise::uniform01(pinned) == 0x1.82a3befaddcbcp-1);  // 0.75515553295453897...
}

TEST_CASE("uniform01 stays below 1 and at or above 0 at the extremes of the generator",
          "[random]") {
    // A generator returning all ones (max) or zero (min) gives the ends of the range.
    Fixed ones{~std::uint64_t{0}}, zero{0};
    CHECK(headwise::uniform01(ones) < 1.0);
    CHECK(headwise::uniform01(ones) == 1.0 - 0x1p-53);
    CHECK(headwise::uniform01(zero) == 0.0);
    // normal() maps u1 = 0 to 1 - 0 = 1: log(1) = 0, finite.
    CHECK(std::isfinite(headwise::normal(zero)));
}

TEST_CASE("uniform(lo, hi) scales uniform01", "[random]") {
    headwise::Generator rng(3), replay(3);
    for (int i = 0; i < 100; ++i) {
        const double u = headwise::uniform_scalar(rng, -2.0, 6.0);
        REQUIRE(u == -2.0 + 8.0 * headwise::uniform01(replay));
        REQUIRE(u >= -2.0);
        REQUIRE(u < 6.0);
    }
}

TEST_CASE("normal draws have mean 0 and variance 1, two generator draws each", "[random]") {
    headwise::Generator rng(42);
    const int n = 100000;
    double sum = 0.0, sum_sq = 0.0, sum_4 = 0.0;
    for (int i = 0; i < n; ++i) {
        const double z = headwise::normal(rng);
        sum += z;
        sum_sq += z * z;
        sum_4 += z * z * z * z;
    }
    const double mean = sum / n, var = sum_sq / n - mean * mean, kurt = sum_4 / n;
    // Standard errors: 1 / sqrt(n) for the mean, sqrt(2 / n) for the variance; 5 sigma each.
    CHECK(std::abs(mean) < 5.0 / std::sqrt(n));
    CHECK(std::abs(var - 1.0) < 5.0 * std::sqrt(2.0 / n));
    CHECK(std::abs(kurt - 3.0) < 0.15);  // a uniform or a scaled distribution would miss this

    // Box-Muller from exactly two draws, no hidden state between calls.
    headwise::Generator a(9), b(9);
    headwise::normal(a);
    b();
    b();
    CHECK(a() == b());
    headwise::Generator c(9), d(9);
    const double first = headwise::normal(c);
    const double u1 = 1.0 - headwise::uniform01(d);
    const double u2 = headwise::uniform01(d);
    CHECK(first ==
          std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925286766559 * u2));
}

TEST_CASE("bernoulli(p) is true with probability p", "[random]") {
    headwise::Generator rng(42);
    const int n = 100000;
    for (const double p : {0.1, 0.5, 0.9}) {
        int hits = 0;
        for (int i = 0; i < n; ++i) hits += headwise::bernoulli(rng, p);
        const double freq = static_cast<double>(hits) / n;
        CAPTURE(p, freq);
        CHECK(std::abs(freq - p) < 5.0 * std::sqrt(p * (1.0 - p) / n));
    }
    for (int i = 0; i < 1000; ++i) {
        REQUIRE_FALSE(headwise::bernoulli(rng, 0.0));
        REQUIRE(headwise::bernoulli(rng, 1.0));
    }
}

TEST_CASE("the same seed gives the same stream, another seed another one", "[random]") {
    headwise::Generator a(123), b(123), c(124);
    int same = 0, differ = 0;
    for (int i = 0; i < 50; ++i) {
        const double x = headwise::normal(a);
        same += x == headwise::normal(b);
        differ += x != headwise::normal(c);
    }
    CHECK(same == 50);
    CHECK(differ == 50);
}

}  // namespace test_random
