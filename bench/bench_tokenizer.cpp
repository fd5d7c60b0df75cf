// SPDX-License-Identifier: MIT
// Tokenizer speed on one thread: MB/s of English text (the project's docs/*.md, concatenated)
// through BpeTokenizer::encode and decode, with the small committed tokenizer
// (tests/golden/bpe/tokenizer.json, 1500 merges) and, when HEADWISE_SMOLLM2_GGUF names
// SmolLM2-135M's GGUF, with its 48900 merges.
//
//   bench_tokenizer [--benchmark_filter=...]

#if __has_include(<nlohmann/json.hpp>) && __has_include(<utf8proc.h>)
#define HEADWISE_BENCH_BPE 1
#include <headwise/text/bpe.hpp>
#else
#define HEADWISE_BENCH_BPE 0
#endif

#include <benchmark/benchmark.h>

#include <algorithm>   // std::sort
#include <cstdint>     // std::int64_t
#include <cstdlib>     // std::getenv
#include <filesystem>  // std::filesystem::directory_iterator
#include <fstream>     // std::ifstream
#include <memory>      // std::unique_ptr
#include <sstream>     // std::ostringstream
#include <string>      // std::string
#include <vector>      // std::vector

#if HEADWISE_BENCH_BPE
namespace {

using headwise::text::BpeTokenizer;

const std::string& english() {
    static const std::string text = [] {
        std::vector<std::filesystem::path> pages;
        for (const auto& e :
             std::filesystem::directory_iterator(std::string(HEADWISE_SOURCE_DIR) + "/docs"))
            if (e.path().extension() == ".md") pages.push_back(e.path());
        std::sort(pages.begin(), pages.end());
        std::ostringstream all;
        for (const auto& p : pages) all << std::ifstream(p).rdbuf();
        return all.str();
    }();
    return text;
}

const BpeTokenizer* tokenizer(int which) {
    static const std::unique_ptr<BpeTokenizer> small =
        std::make_unique<BpeTokenizer>(BpeTokenizer::from_tokenizer_json(
            std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/bpe/tokenizer.json"));
    static const std::unique_ptr<BpeTokenizer> smollm2 = []() -> std::unique_ptr<BpeTokenizer> {
        const char* path = std::getenv("HEADWISE_SMOLLM2_GGUF");
        if (path == nullptr || *path == '\0') return nullptr;
        return std::make_unique<BpeTokenizer>(
            BpeTokenizer::from_gguf(headwise::io::load_gguf(path)));
    }();
    return which == 0 ? small.get() : smollm2.get();
}

void BM_encode(benchmark::State& state) {
    const BpeTokenizer* tok = tokenizer(static_cast<int>(state.range(0)));
    if (tok == nullptr) {
        state.SkipWithError("HEADWISE_SMOLLM2_GGUF is not set");
        return;
    }
    const std::string& text = english();
    std::size_t tokens = 0;
    for (auto _ : state) {
        const std::vector<std::int64_t> ids = tok->encode(text);
        tokens = ids.size();
        benchmark::DoNotOptimize(ids.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
    state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_encode)->ArgNames({"smollm2"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_decode(benchmark::State& state) {
    const BpeTokenizer* tok = tokenizer(static_cast<int>(state.range(0)));
    if (tok == nullptr) {
        state.SkipWithError("HEADWISE_SMOLLM2_GGUF is not set");
        return;
    }
    const std::vector<std::int64_t> ids = tok->encode(english());
    for (auto _ : state) {
        const std::string text = tok->decode(ids);
        benchmark::DoNotOptimize(text.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * english().size()));
}
BENCHMARK(BM_decode)->ArgNames({"smollm2"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
#endif

BENCHMARK_MAIN();
