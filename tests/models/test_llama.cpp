// SPDX-License-Identifier: MIT
// models/llama.hpp and models/generation.hpp: small random-weight LlamaForCausalLM models saved
// by transformers against its logits and greedy generations, sampling, padding and errors.

#include <headwise/io/npy.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>

#include <algorithm>   // std::max
#include <cmath>       // std::abs, std::isfinite, HUGE_VAL
#include <cstdint>     // std::int64_t
#include <filesystem>  // std::filesystem::copy_file
#include <fstream>     // std::ifstream, std::ofstream
#include <sstream>     // std::istringstream
#include <string>      // std::string, std::getline
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/decode_by_token.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"

namespace test_llama {

using headwise::Index;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::models::GenerationOptions;
using headwise::models::LlamaConfig;
using headwise::models::LlamaForCausalLM;
using headwise::test::kProjections;
using headwise::test::ScratchDir;

namespace {

// The prompts of tests/golden/make_llama_golden.py, left-padded there to 7 tokens.
const std::vector<std::vector<std::int64_t>> kPrompts = {
    {1, 17, 42, 99, 5, 63, 120}, {1, 8, 77, 31}, {1, 54}};
constexpr std::int64_t kEos = 2;

std::string model_dir(const std::string& name) {
    return (headwise::test::golden_dir() / "llama" / name).string();
}

std::vector<std::vector<std::int64_t>> recorded_greedy(const std::string& name) {
    std::ifstream in(model_dir(name) + "/greedy.txt");
    std::vector<std::vector<std::int64_t>> lines;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::vector<std::int64_t> ids;
        for (std::int64_t id; words >> id;) ids.push_back(id);
        lines.push_back(ids);
    }
    return lines;
}

// Largest |a - b| / max(|b|, floor) over the non-padding positions of logits [B, L, V].
template <class T>
double logits_error(const Tensor<T>& got, const Tensor<double>& want, const Tensor<bool>& padding,
                    double floor) {
    REQUIRE(got.shape() == want.shape());
    const Index B = got.size(0), L = got.size(1), V = got.size(2);
    double worst = 0;
    for (Index b = 0; b < B; ++b)
        for (Index t = 0; t < L; ++t) {
            if (padding.data()[b * L + t]) continue;
            for (Index v = 0; v < V; ++v) {
                const Index i = (b * L + t) * V + v;
                const double w = want.data()[i];
                const double g = static_cast<double>(got.data()[i]);
                if (!std::isfinite(w) || !std::isfinite(g)) return HUGE_VAL;  // NaN fails
                const double e = std::abs(g - w) / std::max(std::abs(w), floor);
                worst = std::max(worst, e);
            }
        }
    return worst;
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("LlamaConfig reads transformers' config.json", "[llama]") {
    const LlamaConfig tied = LlamaConfig::from_json_file(model_dir("tied") + "/config.json");
    CHECK(tied.hidden_size == 64);
    CHECK(tied.num_key_value_heads == 2);
    CHECK(tied.tie_word_embeddings);
    CHECK(tied.rope_theta == 10000.0);
    CHECK(tied.rope_scaling_factor == 1.0);
    CHECK(tied.eos_token_ids == std::vector<std::int64_t>{kEos});
    CHECK(tied.bos_token_id == std::int64_t{1});
    const LlamaConfig untied = LlamaConfig::from_json_file(model_dir("untied") + "/config.json");
    CHECK_FALSE(untied.tie_word_embeddings);
    CHECK(untied.rope_theta == 500000.0);
    CHECK(untied.rope_scaling_factor == 2.0);
}

TEMPLATE_TEST_CASE("LlamaForCausalLM gives transformers' logits for a left-padded batch", "[llama]",
                   float, double) {
    using T = TestType;
    const std::string name = GENERATE(as<std::string>{}, "tied", "untied");
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, projection);
    auto model = LlamaForCausalLM<T>::from_pretrained(model_dir(name), projection);
    const auto [ids, padding] = headwise::models::left_pad(kPrompts);  // [3, 7] each
    const Tensor<T> logits = model.forward(ids, padding);              // [3, 7, 128]
    // float: against transformers in float32; double: the same weights run in float64.
    const std::string golden = sizeof(T) == 4 ? "/logits.npy" : "/logits_f64.npy";
    const auto want = headwise::load_npy<double>(model_dir(name) + golden);
    const double tol = sizeof(T) == 4 ? 1e-5 : 1e-10;
    const double err = logits_error(logits, want, padding, sizeof(T) == 4 ? 1.0 : 1e-3);
    CAPTURE(err);
    CHECK(err <= tol);
}

TEMPLATE_TEST_CASE("KV-cache decode token by token gives the forward's logits", "[llama]", float,
                   double) {
    using T = TestType;
    auto model = LlamaForCausalLM<T>::from_pretrained(model_dir("untied"));
    const auto [ids, padding] = headwise::models::left_pad(kPrompts);  // [3, 7] each
    const Tensor<T> whole = model.forward(ids, padding);               // [3, 7, V]
    const Index B = ids.size(0), L = ids.size(1), V = whole.size(2);
    auto cache = model.make_cache(B, L);
    const Tensor<T> stepped = headwise::test::decode_by_token<T>(model, ids, padding, cache);
    for (Index b = 0; b < B; ++b)
        for (Index t = 0; t < L; ++t) {
            if (padding.data()[b * L + t]) continue;
            for (Index v = 0; v < V; ++v) {
                const Index i = (b * L + t) * V + v;
                REQUIRE(std::abs(static_cast<double>(stepped.data()[i]) -
                                 static_cast<double>(whole.data()[i])) <=
                        (sizeof(T) == 4 ? 1e-5 : 1e-12));
            }
        }
    CHECK(cache.size() == L);
    // The layers decode one after the other in one scratch; a copy of the cache has its own.
    for (std::size_t i = 1; i < cache.layers.size(); ++i)
        CHECK(cache.layers[i].shares_decode_buffers(cache.layers[0]));
    const auto copy = cache;
    CHECK_FALSE(copy.layers[1].shares_decode_buffers(cache.layers[1]));
}

TEMPLATE_TEST_CASE("decode_last gives decode's last position, tied and untied", "[llama]", float,
                   double) {
    using T = TestType;
    for (const char* name : {"untied", "tied"}) {
        CAPTURE(name);
        auto model = LlamaForCausalLM<T>::from_pretrained(model_dir(name));
        const auto [ids, padding] = headwise::models::left_pad(kPrompts);  // [3, 7] each
        const Index B = ids.size(0), L = ids.size(1);
        auto cache = model.make_cache(B, L), cache_last = model.make_cache(B, L);
        const Tensor<T> all = model.decode(ids, cache, padding);  // [B, L, V]
        const Tensor<T> last = model.decode_last(ids, cache_last, padding);
        const Index V = all.size(2);
        REQUIRE(last.shape() == Shape({B, 1, V}));
        CHECK(cache_last.size() == L);
        for (Index b = 0; b < B; ++b)
            for (Index v = 0; v < V; ++v)
                REQUIRE(std::abs(static_cast<double>(last.data()[b * V + v]) -
                                 static_cast<double>(all.data()[(b * L + L - 1) * V + v])) <=
                        (sizeof(T) == 4 ? 1e-5 : 1e-12));
    }
}

TEMPLATE_TEST_CASE("decode_last in chunks gives decode_last at once, padding included", "[llama]",
                   float, double) {
    using T = TestType;
    auto model = LlamaForCausalLM<T>::from_pretrained(model_dir("untied"));
    const auto [ids, padding] = headwise::models::left_pad(kPrompts);  // [3, 7] each
    const Index B = ids.size(0), L = ids.size(1);
    auto whole_cache = model.make_cache(B, L + 1);
    const Tensor<T> whole = model.decode_last(ids, whole_cache, padding, 0);  // [B, 1, V]
    Tensor<std::int64_t> next(Shape{B, 1});
    for (Index b = 0; b < B; ++b) next.data()[b] = 5 + b;
    const Tensor<T> whole_next = model.decode_last(next, whole_cache);
    for (const Index chunk : {1, 2, 3, 6}) {
        CAPTURE(chunk);
        auto cache = model.make_cache(B, L + 1);
        const Tensor<T> last = model.decode_last(ids, cache, padding, chunk);
        CHECK(cache.size() == L);
        REQUIRE(last.shape() == whole.shape());
        double err = 0;
        for (Index i = 0; i < last.numel(); ++i)
            err = std::max(err, std::abs(static_cast<double>(last.data()[i]) -
                                         static_cast<double>(whole.data()[i])));
        CHECK(err <= (sizeof(T) == 4 ? 1e-5 : 1e-12));
        // The cache holds what one decode left: the next token's logits agree too.
        const Tensor<T> after = model.decode_last(next, cache);
        err = 0;
        for (Index i = 0; i < after.numel(); ++i)
            err = std::max(err, std::abs(static_cast<double>(after.data()[i]) -
                                         static_cast<double>(whole_next.data()[i])));
        CHECK(err <= (sizeof(T) == 4 ? 1e-5 : 1e-12));
    }
}

TEST_CASE("decode_last in chunks refuses before the first chunk changes the cache", "[llama]") {
    auto model = LlamaForCausalLM<float>::from_pretrained(model_dir("tied"));
    const Index V = model.config().vocab_size;
    Tensor<std::int64_t> ids(Shape{1, 6});
    for (Index t = 0; t < 6; ++t) ids.data()[t] = t + 1;
    ids.data()[5] = V;  // in the last chunk
    auto cache = model.make_cache(1, 8);
    const std::string message = "headwise::Embedding::forward: indices: entry 5 (flat) is " +
                                std::to_string(V) + ", expected an index in [0, " +
                                std::to_string(V) + ")";
    CHECK_THROWS_MATCHES(model.decode_last(ids, cache, {}, 2), std::out_of_range,
                         Catch::Matchers::Message(message));
    CHECK(cache.size() == 0);
    CHECK_THROWS_MATCHES(model.decode_last(ids, cache, {}, 0), std::out_of_range,
                         Catch::Matchers::Message(message));  // the same words at once
    ids.data()[5] = 1;
    auto small = model.make_cache(1, 5);
    CHECK_THROWS_AS(model.decode_last(ids, small, {}, 2), std::invalid_argument);  // no room
    CHECK(small.size() == 0);
    CHECK_THROWS_MATCHES(
        model.decode_last(ids, cache, {}, -1), std::invalid_argument,
        Catch::Matchers::Message("headwise::models::LlamaForCausalLM::decode_last: chunk: "
                                 "expected 0 (all at once) or a positive token count, got -1"));
    CHECK(cache.size() == 0);
}

TEMPLATE_TEST_CASE("Greedy generation is transformers' token for token", "[llama]", float, double) {
    using T = TestType;
    const std::string name = GENERATE(as<std::string>{}, "tied", "untied");
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, projection);
    auto model = LlamaForCausalLM<T>::from_pretrained(model_dir(name), projection);
    const auto want = recorded_greedy(name);
    REQUIRE(want.size() == kPrompts.size());
    GenerationOptions options;
    options.max_new_tokens = 24;
    options.stop_tokens = model.config().eos_token_ids;
    // The batch (left-padded) and each prompt alone.
    CHECK(headwise::models::generate(model, kPrompts, options) == want);
    for (std::size_t b = 0; b < kPrompts.size(); ++b) {
        CAPTURE(b);
        CHECK(headwise::models::generate(model, {kPrompts[b]}, options).at(0) == want[b]);
    }
}

TEST_CASE("Sampling is reproducible from the seed and independent of the batch", "[llama]") {
    auto model = LlamaForCausalLM<float>::from_pretrained(model_dir("tied"));
    GenerationOptions options;
    options.max_new_tokens = 20;
    options.temperature = 1.5;
    options.top_k = 40;
    options.top_p = 0.9;
    options.seed = 7;
    const auto a = headwise::models::generate(model, kPrompts, options);
    const auto again = headwise::models::generate(model, kPrompts, options);
    CHECK(a == again);
    // Sequence 0 draws from seed + 0 whatever the other prompts are.
    CHECK(headwise::models::generate(model, {kPrompts[0]}, options).at(0) == a[0]);
    options.seed = 8;
    const auto b = headwise::models::generate(model, kPrompts, options);
    CHECK(b != a);
    // top_k = 1 is greedy whatever the temperature and seed.
    options.top_k = 1;
    GenerationOptions greedy;
    greedy.max_new_tokens = 20;
    CHECK(headwise::models::generate(model, kPrompts, options) ==
          headwise::models::generate(model, kPrompts, greedy));
}

TEST_CASE("choose_next_token follows the documented procedure", "[llama]") {
    const float logits[4] = {1.0f, 3.0f, 2.0f, 3.0f};
    GenerationOptions options;
    headwise::Generator rng(0);
    CHECK(headwise::models::choose_next_token(logits, 4, options, rng) == 1);  // lower id on ties
    options.temperature = 1.0;
    options.top_k = 2;  // ids 1 and 3 only
    std::vector<int> seen(4, 0);
    for (int i = 0; i < 400; ++i)
        ++seen[static_cast<std::size_t>(
            headwise::models::choose_next_token(logits, 4, options, rng))];
    CHECK(seen[0] == 0);
    CHECK(seen[2] == 0);
    CHECK(seen[1] > 150);
    CHECK(seen[3] > 150);
    options.top_k = 0;
    options.top_p = 0.5;  // p(1) = p(3) = 0.42, p(2) = 0.16, p(0) = 0.06: ids 1 and 3
    std::fill(seen.begin(), seen.end(), 0);
    for (int i = 0; i < 400; ++i)
        ++seen[static_cast<std::size_t>(
            headwise::models::choose_next_token(logits, 4, options, rng))];
    CHECK(seen[0] + seen[2] == 0);
    CHECK(seen[1] > 150);
}

TEST_CASE("from_pretrained names the file and the entry on errors", "[llama]") {
    ScratchDir dir("llama");
    const std::string d = dir.path().string();
    try {
        LlamaForCausalLM<float>::from_pretrained(d);
        FAIL("no error");
    } catch (const std::runtime_error& e) {
        CHECK_THAT(e.what(), ContainsSubstring(d + "/config.json"));
    }
    const std::string config = read_text(model_dir("untied") + "/config.json");
    write_text(d + "/config.json", config);
    try {
        LlamaForCausalLM<float>::from_pretrained(d);
        FAIL("no error");
    } catch (const std::runtime_error& e) {
        CHECK_THAT(e.what(), ContainsSubstring(d + "/model.safetensors"));
    }
    // The tied model's weights (no lm_head.weight) under the untied config.
    std::filesystem::copy_file(model_dir("tied") + "/model.safetensors", d + "/model.safetensors");
    try {
        LlamaForCausalLM<float>::from_pretrained(d);
        FAIL("no error");
    } catch (const std::invalid_argument& e) {
        CHECK_THAT(e.what(), ContainsSubstring("model.safetensors") &&
                                 ContainsSubstring("lm_head.weight: missing"));
    }
    const auto refused = [&](const std::string& from, const std::string& to,
                             const std::string& key) {
        std::string text = config;
        const auto at = text.find(from);
        REQUIRE(at != std::string::npos);
        text.replace(at, from.size(), to);
        write_text(d + "/config.json", text);
        try {
            LlamaForCausalLM<float>::from_pretrained(d);
            FAIL("no error for " + to);
        } catch (const std::runtime_error& e) {
            CHECK_THAT(e.what(), ContainsSubstring(d + "/config.json") && ContainsSubstring(key));
        }
    };
    refused("\"rope_type\": \"linear\"", "\"rope_type\": \"longrope\"", "rope_parameters");
    refused("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act");
    refused("\"head_dim\": 16", "\"head_dim\": 15", "head_dim");
    refused("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "num_key_value_heads");
    refused("\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"", "model_type");
}

TEST_CASE("decode and generate check their arguments first", "[llama]") {
    auto model = LlamaForCausalLM<float>::from_pretrained(model_dir("tied"));
    auto cache = model.make_cache(1, 4);
    Tensor<std::int64_t> five(Shape{1, 5});
    CHECK_THROWS_AS(model.decode(five, cache), std::invalid_argument);
    CHECK(cache.size() == 0);
    Tensor<std::int64_t> two(Shape{2, 1});
    CHECK_THROWS_AS(model.decode(two, cache), std::invalid_argument);
    Tensor<std::int64_t> bad(Shape{1, 1});
    bad.data()[0] = 128;
    CHECK_THROWS_AS(model.decode(bad, cache), std::out_of_range);
    GenerationOptions options;
    CHECK_THROWS_AS(headwise::models::generate(model, {}, options), std::invalid_argument);
    CHECK_THROWS_AS(headwise::models::generate(model, {{}}, options), std::invalid_argument);
    options.top_p = 0.0;
    CHECK_THROWS_AS(headwise::models::generate(model, {{1}}, options), std::invalid_argument);
}

TEST_CASE("left_pad pads each prompt on the left to the longest, marking the padding",
          "[llama][generate]") {
    const auto batch = headwise::models::left_pad({{5, 6, 7}, {8}, {}}, /*pad_id=*/9);
    REQUIRE(batch.ids.shape() == Shape{3, 3});
    REQUIRE(batch.padding.shape() == Shape{3, 3});
    const std::vector<std::int64_t> ids(batch.ids.data(), batch.ids.data() + 9);
    const std::vector<bool> padding(batch.padding.data(), batch.padding.data() + 9);
    CHECK(ids == std::vector<std::int64_t>{5, 6, 7, 9, 9, 8, 9, 9, 9});
    CHECK(padding == std::vector<bool>{false, false, false, true, true, false, true, true, true});
    const auto none = headwise::models::left_pad({});
    CHECK(none.ids.shape() == Shape{0, 0});
    CHECK(none.padding.shape() == Shape{0, 0});
}

}  // namespace test_llama
