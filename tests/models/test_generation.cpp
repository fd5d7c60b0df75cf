// SPDX-License-Identifier: MIT
// models/generation.hpp without a model file: choose_next_token at extreme temperatures, the
// last id of a top-k or top-p selection drawn by a generator whose draws are all ones, the
// argument checks, and generate()'s KV cache length checked before anything is allocated (stub
// models). Generation with real models: tests/models/test_llama.cpp.
#include <headwise/models/generation.hpp>

#include <algorithm>    // std::min
#include <cstdint>      // std::int64_t, std::uint64_t
#include <limits>       // std::numeric_limits
#include <random>       // std::mt19937_64
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::conditional_t
#include <vector>       // std::vector

#include "support/catch.hpp"

namespace test_generation {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::models::choose_next_token;
using headwise::models::GenerationOptions;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A generator whose every draw is its maximum, so that uniform01 gives its largest value,
/// 1 - 2^-53: the draw that lands on the last id of a selection.
struct AllOnes {
    using result_type = std::uint64_t;
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return ~result_type{0}; }
    result_type operator()() { return max(); }
};

/// A generator whose every draw is 0 (uniform01 gives 0: the first id of a selection).
struct AllZeros {
    using result_type = std::uint64_t;
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return ~result_type{0}; }
    result_type operator()() { return 0; }
};

GenerationOptions sampling(double temperature, Index top_k = 0, double top_p = 1.0) {
    GenerationOptions o;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    return o;
}

struct CacheMade {};  // thrown by the stub's make_cache, after it has recorded the capacity

/// A causal LM as generate() uses it, that records the cache it is asked for and refuses to
/// make it; its config has max_position_embeddings when `Bounded`.
template <bool Bounded>
struct ScriptedModel {
    struct Config {
        Index vocab_size = 4;
    };
    struct BoundedConfig {
        Index vocab_size = 4;
        Index max_position_embeddings = 16;
    };
    using ConfigType = std::conditional_t<Bounded, BoundedConfig, Config>;
    ConfigType config_;
    Index capacity = -1;  // the capacity make_cache was asked for; -1: not called

    const ConfigType& config() const { return config_; }
    int make_cache(Index /*batch*/, Index cache_capacity) {
        capacity = cache_capacity;
        throw CacheMade{};
    }
    template <class Ids, class Padding>
    Tensor<float> decode(const Ids& ids, int& /*cache*/, const Padding& /*padding*/) {
        return Tensor<float>(Shape{ids.shape()[0], ids.shape()[1], config_.vocab_size});
    }
};

}  // namespace

TEST_CASE("choose_next_token at a tiny temperature picks the most likely id", "[generate]") {
    const float logits[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    std::mt19937_64 rng(5);
    AllOnes ones;
    AllZeros zeros;
    // logits / T alone overflows to inf for these (inf - inf = NaN): the answer must still be
    // the highest logit, for every draw.
    for (double t : {1e-310, 5e-324, 1e-300, 1e-30}) {
        CAPTURE(t);
        for (int i = 0; i < 20; ++i) CHECK(choose_next_token(logits, 4, sampling(t), rng) == 1);
        CHECK(choose_next_token(logits, 4, sampling(t), ones) == 1);
        CHECK(choose_next_token(logits, 4, sampling(t), zeros) == 1);
        CHECK(choose_next_token(logits, 4, sampling(t, 3, 0.9), ones) == 1);
    }
    // The extremes of double, at the smallest temperature.
    const double wide[3] = {-1.7e308, 1.7e308, 1.6e308};
    CHECK(choose_next_token(wide, 3, sampling(5e-324), ones) == 1);
    CHECK(choose_next_token(wide, 3, sampling(5e-324), rng) == 1);
    // Equal highest logits share the mass as the temperature goes to 0: the first and the last
    // draw pick the first and the last of them, and -inf logits get none.
    const double tied[5] = {-kInf, 2.0, 0.0, 2.0, -kInf};
    CHECK(choose_next_token(tied, 5, sampling(1e-310), zeros) == 1);
    CHECK(choose_next_token(tied, 5, sampling(1e-310), ones) == 3);
    // A huge temperature is uniform: the last draw picks the last id.
    CHECK(choose_next_token(logits, 4, sampling(1e308), ones) == 3);
}

TEST_CASE("the last id of a top-p or top-k selection can be drawn", "[generate]") {
    const double logits[4] = {0.0, 0.0, 0.0, 0.0};  // p = 0.25 each, ids in order
    AllOnes ones;
    AllZeros zeros;
    const double top_ps[4] = {0.25, 0.5, 0.5000001, 1.0};
    // top_k = 2 cuts first: p = 0.5 each over the two kept ids, then the nucleus.
    const std::int64_t last_of_top2[4] = {0, 0, 1, 1};
    for (std::int64_t id = 0; id < 4; ++id) {
        const double top_p = top_ps[id];
        CAPTURE(top_p);
        CHECK(choose_next_token(logits, 4, sampling(1.0, 0, top_p), ones) == id);
        CHECK(choose_next_token(logits, 4, sampling(1.0, 0, top_p), zeros) == 0);
        CHECK(choose_next_token(logits, 4, sampling(1.0, 2, top_p), ones) == last_of_top2[id]);
    }
    for (Index k = 1; k <= 5; ++k) {
        CAPTURE(k);
        CHECK(choose_next_token(logits, 4, sampling(1.0, k), ones) == std::min<Index>(k, 4) - 1);
    }
    // Sorted by logit, p = 0.54 (id 2), 0.33 (id 0), 0.07, 0.07: the nucleus of 0.5 is {2}, of
    // 0.8 {2, 0}, whose last id is 0.
    const float skewed[4] = {0.6f, -1.0f, 1.1f, -1.0f};
    CHECK(choose_next_token(skewed, 4, sampling(1.0, 0, 0.5), ones) == 2);
    CHECK(choose_next_token(skewed, 4, sampling(1.0, 0, 0.8), ones) == 0);
}

TEST_CASE("choose_next_token checks its arguments before drawing", "[generate][errors]") {
    const double logits[3] = {0.5, 1.5, -1.0};
    std::mt19937_64 rng(9);
    const std::mt19937_64 before = rng;
    const std::string fn = "headwise::models::choose_next_token: ";
    CHECK_THROWS_WITH(choose_next_token(logits, 0, sampling(1.0), rng),
                      fn + "V: must be positive (the logits row [V]), got 0");
    CHECK_THROWS_WITH(choose_next_token(logits, -3, GenerationOptions{}, rng),
                      fn + "V: must be positive (the logits row [V]), got -3");
    CHECK_THROWS_WITH(choose_next_token(static_cast<const double*>(nullptr), 3, sampling(1.0), rng),
                      fn + "logits: must not be null, got null");
    CHECK_THROWS_AS(choose_next_token(logits, 3, sampling(-1.0), rng), std::invalid_argument);
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(-1.0), rng),
                      fn + "options.temperature: must be finite and >= 0, got -1");
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(-1e-310), rng),
                      fn + "options.temperature: must be finite and >= 0, got -1e-310");
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(kNaN), rng),
                      ContainsSubstring(fn + "options.temperature: must be finite and >= 0, got") &&
                          ContainsSubstring("nan"));
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(kInf), rng),
                      fn + "options.temperature: must be finite and >= 0, got inf");
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(1.0, -1), rng),
                      fn + "options.top_k: must be >= 0 (0: off), got -1");
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(1.0, 0, 0.0), rng),
                      fn + "options.top_p: must be in (0, 1], got 0");
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(1.0, 0, 1.5), rng),
                      fn + "options.top_p: must be in (0, 1], got 1.5");
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(1.0, 0, -0.25), rng),
                      fn + "options.top_p: must be in (0, 1], got -0.25");
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(1.0, 0, kNaN), rng),
                      ContainsSubstring(fn + "options.top_p: must be in (0, 1], got") &&
                          ContainsSubstring("nan"));
    // Greedy checks the options too: a negative temperature is no request for greedy.
    CHECK_THROWS_WITH(choose_next_token(logits, 3, sampling(0.0, -2), rng),
                      fn + "options.top_k: must be >= 0 (0: off), got -2");
    // Logits: NaN and +inf are refused in either mode; -inf is a probability of 0, but not all.
    const double with_nan[3] = {0.5, kNaN, 1.0};
    const float with_inf[3] = {0.5f, 1.0f, std::numeric_limits<float>::infinity()};
    const double all_minus_inf[2] = {-kInf, -kInf};
    for (double t : {0.0, 1.0}) {
        CAPTURE(t);
        CHECK_THROWS_WITH(choose_next_token(with_nan, 3, sampling(t), rng),
                          ContainsSubstring(fn + "logits[1]: must be a number below +inf, got") &&
                              ContainsSubstring("nan"));
        CHECK_THROWS_WITH(choose_next_token(with_inf, 3, sampling(t), rng),
                          fn + "logits[2]: must be a number below +inf, got inf");
        CHECK_THROWS_WITH(choose_next_token(all_minus_inf, 2, sampling(t), rng),
                          fn + "logits: must hold a value above -inf, got all 2 are -inf");
    }
    CHECK(rng == before);  // nothing drawn
    const double masked[3] = {-kInf, 0.0, -kInf};
    CHECK(choose_next_token(masked, 3, sampling(0.0), rng) == 1);
    CHECK(choose_next_token(masked, 3, sampling(2.0), rng) == 1);
}

TEST_CASE("generate checks the KV cache length before it allocates", "[generate][errors]") {
    const std::vector<std::vector<std::int64_t>> prompts = {{1, 2, 3}, {1, 2, 3, 4, 5}};  // L = 5
    const std::string fn = "headwise::models::generate: options.max_new_tokens: ";
    constexpr Index kMax = std::numeric_limits<Index>::max();
    GenerationOptions options;

    ScriptedModel<true> bounded;  // max_position_embeddings 16
    options.max_new_tokens = 12;  // 5 + 12 - 1 = 16 positions: fits
    CHECK_THROWS_AS(headwise::models::generate(bounded, prompts, options), CacheMade);
    CHECK(bounded.capacity == 16);
    bounded.capacity = -1;
    options.max_new_tokens = 13;
    CHECK_THROWS_WITH(headwise::models::generate(bounded, prompts, options),
                      fn + "the longest prompt (5 tokens) + max_new_tokens - 1 must be at most "
                           "the model's config().max_position_embeddings = 16, got 13");
    options.max_new_tokens = kMax;  // past the bound, and past what Index can count
    CHECK_THROWS_WITH(headwise::models::generate(bounded, prompts, options),
                      fn +
                          "the longest prompt (5 tokens) + max_new_tokens - 1 must be at most "
                          "the model's config().max_position_embeddings = 16, got " +
                          std::to_string(kMax));
    CHECK(bounded.capacity == -1);  // refused before make_cache

    ScriptedModel<false> unbounded;  // no max_position_embeddings: only what Index can count
    options.max_new_tokens = kMax - 3;
    CHECK_THROWS_WITH(headwise::models::generate(unbounded, prompts, options),
                      fn +
                          "must keep the prompt length 5 + max_new_tokens - 1 representable, got " +
                          std::to_string(kMax - 3));
    CHECK(unbounded.capacity == -1);
    options.max_new_tokens = kMax - 4;  // 5 + (max - 4) - 1 = max
    CHECK_THROWS_AS(headwise::models::generate(unbounded, prompts, options), CacheMade);
    CHECK(unbounded.capacity == kMax);

    // The sampling options are checked as choose_next_token checks them, before the cache too.
    options.max_new_tokens = 2;
    options.temperature = -1e-310;
    unbounded.capacity = -1;
    CHECK_THROWS_WITH(headwise::models::generate(unbounded, prompts, options),
                      "headwise::models::generate: options.temperature: must be finite and >= 0, "
                      "got -1e-310");
    CHECK(unbounded.capacity == -1);
}

}  // namespace test_generation
