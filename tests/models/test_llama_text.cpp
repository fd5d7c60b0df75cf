// SPDX-License-Identifier: MIT
// The committed tiny text model (tests/golden/llama_text): a sharded Hugging Face checkpoint
// (io/safetensors_checkpoint.hpp) against the same tensors in one file, generate()'s token
// callback, and models/perplexity.hpp against a direct computation token by token through the
// KV cache.

#include <headwise/io/safetensors.hpp>
#include <headwise/io/safetensors_checkpoint.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/models/perplexity.hpp>

#include <cmath>       // std::exp, std::log
#include <cstdint>     // std::int64_t
#include <filesystem>  // std::filesystem::copy_file
#include <fstream>     // std::ofstream
#include <optional>    // std::optional
#include <random>      // std::mt19937
#include <stdexcept>   // std::invalid_argument, std::runtime_error
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace test_llama_text {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::models::LlamaForCausalLM;
using headwise::test::ScratchDir;
using Ids = std::vector<std::int64_t>;

namespace {

// Runs f; it must throw E whose what() contains `part`.
template <class E, class F>
void check_throws(F&& f, const std::string& part) {
    try {
        f();
        FAIL("no exception; expected one containing: " << part);
    } catch (const E& e) {
        CHECK_THAT(std::string(e.what()), ContainsSubstring(part));
    }
}

const std::string kHf = std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/llama_text/hf";

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
}

Ids random_tokens(std::size_t n, std::int64_t vocab, unsigned seed) {
    std::mt19937 rng(seed);
    Ids ids(n);
    for (auto& id : ids) id = static_cast<std::int64_t>(rng() % static_cast<unsigned>(vocab));
    return ids;
}

// llama-perplexity's number from first principles: each window fed token by token through the
// KV cache (its first token BOS when given), -log p(next token) from each position of the
// second half but the last, in double.
double direct_perplexity(LlamaForCausalLM<float>& model, const Ids& tokens, Index n_ctx,
                         std::optional<std::int64_t> bos) {
    const Index V = model.config().vocab_size;
    double sum = 0.0;
    Index count = 0;
    for (Index start = 0; start + n_ctx <= static_cast<Index>(tokens.size()); start += n_ctx) {
        auto cache = model.make_cache(1, n_ctx);
        for (Index i = 0; i < n_ctx; ++i) {
            Tensor<std::int64_t> one(Shape{1, 1});
            one.data()[0] = i == 0 && bos ? *bos : tokens[static_cast<std::size_t>(start + i)];
            const auto logits = model.decode(one.view(), cache);  // [1, 1, V]
            if (i < n_ctx / 2 || i == n_ctx - 1) continue;
            double z = 0.0;
            for (Index v = 0; v < V; ++v) z += std::exp(static_cast<double>(logits.data()[v]));
            const auto next = tokens[static_cast<std::size_t>(start + i + 1)];
            sum += std::log(z) - static_cast<double>(logits.data()[next]);
            ++count;
        }
    }
    return std::exp(sum / static_cast<double>(count));
}

}  // namespace

TEST_CASE("A sharded checkpoint loads as the same tensors in one file", "[llama]") {
    const auto sharded = headwise::io::load_safetensors_checkpoint<float>(kHf);
    CHECK(sharded.source == kHf + "/model.safetensors.index.json");
    CHECK(sharded.tensors.size() == 20);  // embedding, final norm, 9 per layer
    ScratchDir one("llama-text-one-file");
    std::filesystem::copy_file(kHf + "/config.json", one.file("config.json"));
    headwise::io::save_safetensors(one.file("model.safetensors"), sharded.tensors);
    auto a = LlamaForCausalLM<float>::from_pretrained(kHf);
    auto b = LlamaForCausalLM<float>::from_pretrained(one.path().string());
    Tensor<std::int64_t> ids(Shape{1, 6}, std::vector<std::int64_t>{1, 5, 900, 17, 1759, 2});
    const auto la = a.forward(ids.view());
    const auto lb = b.forward(ids.view());
    REQUIRE(la.numel() == lb.numel());
    for (Index i = 0; i < la.numel(); ++i) REQUIRE(la.data()[i] == lb.data()[i]);
}

TEST_CASE("A sharded checkpoint's index is checked", "[llama]") {
    const auto make = [](const ScratchDir& dir, const std::string& index) {
        for (const char* shard :
             {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
            std::filesystem::copy_file(kHf + "/" + shard, dir.file(shard));
        write_text(dir.file("model.safetensors.index.json"), index);
    };
    const std::string fn = "headwise::io::load_safetensors_checkpoint: ";
    ScratchDir up("llama-text-index-up");
    make(up, R"({"weight_map": {"model.norm.weight": "../model-00002-of-00002.safetensors"}})");
    check_throws<std::runtime_error>(
        [&] { (void)headwise::io::load_safetensors_checkpoint<float>(up.path().string()); },
        fn + up.file("model.safetensors.index.json") +
            ": weight_map[\"model.norm.weight\"] must be a file name in "
            "the directory (no '/'), got "
            "\"../model-00002-of-00002.safetensors\"");
    ScratchDir wrong("llama-text-index-wrong");
    make(wrong, R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
    check_throws<std::runtime_error>(
        [&] { (void)headwise::io::load_safetensors_checkpoint<float>(wrong.path().string()); },
        "weight_map gives \"model.norm.weight\" to \"model-00001-of-00002.safetensors\", "
        "which does not hold it");
    ScratchDir empty("llama-text-index-empty");
    make(empty, R"({"metadata": {}})");
    check_throws<std::runtime_error>(
        [&] { (void)headwise::io::load_safetensors_checkpoint<float>(empty.path().string()); },
        "weight_map must be a non-empty object of tensor: shard file, got none");
    // A shard missing: load_safetensors names it.
    ScratchDir missing("llama-text-index-missing");
    write_text(missing.file("model.safetensors.index.json"),
               R"({"weight_map": {"model.norm.weight": "gone.safetensors"}})");
    check_throws<std::runtime_error>(
        [&] { (void)headwise::io::load_safetensors_checkpoint<float>(missing.path().string()); },
        missing.file("gone.safetensors"));
    // Neither file: model.safetensors is named, as before sharding was read.
    ScratchDir none("llama-text-index-none");
    check_throws<std::runtime_error>(
        [&] { (void)headwise::io::load_safetensors_checkpoint<float>(none.path().string()); },
        none.file("model.safetensors"));
}

TEST_CASE("generate() calls back each token as it is chosen", "[llama]") {
    auto model = LlamaForCausalLM<float>::from_pretrained(kHf);
    headwise::models::GenerationOptions o;
    o.max_new_tokens = 12;
    const std::vector<Ids> prompts{{1, 300, 301}, {1, 5}};
    std::vector<Ids> seen(2);
    const auto out = headwise::models::generate(model, prompts, o, [&](Index b, std::int64_t id) {
        seen[static_cast<std::size_t>(b)].push_back(id);
    });
    CHECK(out == seen);
    CHECK(out == headwise::models::generate(model, prompts, o));
}

TEST_CASE("perplexity() is llama-perplexity's number, computed directly", "[llama]") {
    auto model = LlamaForCausalLM<float>::from_pretrained(kHf);
    const std::int64_t V = model.config().vocab_size;
    for (const Index n_ctx : {Index{3}, Index{8}, Index{17}}) {
        for (const std::optional<std::int64_t> bos :
             {std::optional<std::int64_t>(), std::optional<std::int64_t>(1)}) {
            // 3.5 windows: the partial one is dropped.
            const Ids tokens = random_tokens(static_cast<std::size_t>(n_ctx * 7 / 2), V, 11);
            CAPTURE(n_ctx, bos.has_value());
            headwise::models::PerplexityOptions o;
            o.context = n_ctx;
            o.bos_id = bos;
            std::vector<double> running;
            const auto r = headwise::models::perplexity(model, tokens, o, [&](Index w, double p) {
                CHECK(w == static_cast<Index>(running.size()));
                running.push_back(p);
            });
            CHECK(r.windows == 3);
            CHECK(r.scored == 3 * (n_ctx - 1 - n_ctx / 2));
            const double want = direct_perplexity(model, tokens, n_ctx, bos);
            CHECK(r.perplexity == Catch::Approx(want).epsilon(1e-5));
            CHECK(r.perplexity == Catch::Approx(std::exp(r.mean_nll)).epsilon(1e-12));
            REQUIRE(running.size() == 3);
            CHECK(running.back() == Catch::Approx(r.perplexity).epsilon(1e-12));
        }
    }
}

TEST_CASE("perplexity() refuses what llama-perplexity refuses", "[llama]") {
    auto model = LlamaForCausalLM<float>::from_pretrained(kHf);
    headwise::models::PerplexityOptions o;
    o.context = 8;
    const std::string fn = "headwise::models::perplexity: ";
    check_throws<std::invalid_argument>(
        [&] { (void)headwise::models::perplexity(model, random_tokens(15, 100, 1), o); },
        fn + "tokens: must number at least 2 * context = 16 (llama-perplexity's "
             "rule), got 15 tokens");
    check_throws<std::invalid_argument>(
        [&] { (void)headwise::models::perplexity(model, Ids(16, 1760), o); },
        fn + "tokens[0]: must be in [0, vocab_size = 1760), got 1760");
    o.context = 2;
    check_throws<std::invalid_argument>(
        [&] { (void)headwise::models::perplexity(model, random_tokens(40, 100, 1), o); },
        fn + "options.context: must be at least 3");
    o.context = 8;
    o.bos_id = -1;
    check_throws<std::invalid_argument>(
        [&] { (void)headwise::models::perplexity(model, random_tokens(40, 100, 1), o); },
        fn + "options.bos_id: must be in [0, ");
}

TEST_CASE("The GGUF file dequantized is the directory's model", "[llama]") {
    auto a = LlamaForCausalLM<float>::from_pretrained(kHf);
    auto b = LlamaForCausalLM<float>::from_gguf(
        std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/llama_text/model.gguf",
        headwise::models::GgufWeights::float32);
    const Ids tokens = random_tokens(24, a.config().vocab_size, 5);
    Tensor<std::int64_t> ids(Shape{1, 24}, tokens);
    const auto la = a.forward(ids.view());
    const auto lb = b.forward(ids.view());
    REQUIRE(la.numel() == lb.numel());
    double worst = 0.0;
    for (Index i = 0; i < la.numel(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(la.data()[i] - lb.data()[i])));
    CHECK(worst == 0.0);
}

TEST_CASE("perplexity() of the GGUF file dequantized is the directory's", "[llama]") {
    auto a = LlamaForCausalLM<float>::from_pretrained(kHf);
    auto b = LlamaForCausalLM<float>::from_gguf(
        std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/llama_text/model.gguf",
        headwise::models::GgufWeights::float32);
    const Ids tokens = random_tokens(40, a.config().vocab_size, 9);
    headwise::models::PerplexityOptions o;
    o.context = 8;
    CHECK(headwise::models::perplexity(a, tokens, o).perplexity ==
          headwise::models::perplexity(b, tokens, o).perplexity);
}

}  // namespace test_llama_text
