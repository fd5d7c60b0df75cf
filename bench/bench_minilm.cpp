// SPDX-License-Identifier: MIT
// all-MiniLM-L6-v2 sentence embeddings with headwise: model load time, and the worker of
// bench/run.py's minilm suite, timed side by side with PyTorch, ONNX Runtime and CTranslate2.
//
//   bench_minilm load <model_dir> [repeats]
//       from_pretrained, `repeats` times (default 20): median and min wall time, peak RSS.
//   bench_minilm worker <threads> <model_dir> [bf16|prepared]
//       loads the model (with bf16: switched to bf16 inference, the float weights released;
//       with prepared: prepared float weights, with_prepared_weights()),
//       then answers bench/worker_process.hpp's protocol; a case is
//         setup <id> <ids.txt>   embed_batch of the file's token ids
//       The ids files hold "B L" then B * L token ids (every position a token: no padding),
//       the same ids the Python engines read; a call is encoder + mean pooling + L2 normalisation.
//   bench_minilm --benchmark_list_tests=true
//       lists the cases (the build's check that the program starts).
//
// Threads: OpenBLAS's own (headwise's non-GEMM work runs on the calling thread unless the build
// uses OpenMP, whose thread count is set too).

// The model needs nlohmann/json (config, safetensors) and utf8proc (the tokenizer); without
// them the program only lists its cases and says so.
#if __has_include(<nlohmann/json.hpp>) && __has_include(<utf8proc.h>)
#define HEADWISE_BENCH_MINILM 1
#include <headwise/models/sentence_embedding.hpp>
#else
#define HEADWISE_BENCH_MINILM 0
#endif
#include <headwise/detail/parallel.hpp>  // HEADWISE_PARALLEL, <omp.h> when set
#include <headwise/ops/gemm.hpp>         // HEADWISE_GEMM_CBLAS, <cblas.h> when set

#include "worker_process.hpp"  // serve, WorkerCase, status_kb, median

#include <algorithm>  // std::sort, std::min_element
#include <chrono>     // std::chrono::steady_clock
#include <cstdio>     // std::printf, std::fflush
#include <cstdlib>    // std::atoi
#include <fstream>    // std::ifstream
#include <memory>     // std::unique_ptr
#include <sstream>    // std::istringstream
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::getline
#include <vector>     // std::vector

#if HEADWISE_BENCH_MINILM
namespace {

using Clock = std::chrono::steady_clock;
using headwise::Index;
using headwise::Tensor;
using headwise_bench::median;
using headwise_bench::status_kb;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

int load(const std::string& dir, int repeats) {
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = Clock::now();
        auto model = headwise::models::BertModel<float>::from_pretrained(dir);
        times.push_back(seconds_since(t0));
    }
    std::printf("load: median %.1f ms, min %.1f ms over %d loads; peak RSS %ld kB\n",
                1e3 * median(times), 1e3 * *std::min_element(times.begin(), times.end()), repeats,
                status_kb("VmHWM"));
    return 0;
}

/// A batch from a text file "B L" then B * L token ids (every position a token: no padding).
headwise::text::BertBatch read_batch(const std::string& path) {
    std::ifstream in(path);
    Index B = 0, L = 0;
    if (!(in >> B >> L) || B <= 0 || L <= 0)
        throw std::runtime_error(path + ": expected \"B L\" then B * L token ids");
    Tensor<std::int64_t> ids(headwise::Shape{B, L});
    for (Index i = 0; i < B * L; ++i)
        if (!(in >> ids.data()[i])) throw std::runtime_error(path + ": too few token ids");
    headwise::text::BertBatch b;
    b.input_ids = ids;
    b.padding_mask = Tensor<bool>(ids.shape());  // all false: every position a token
    for (Index i = 0; i < ids.shape()[0]; ++i) b.lengths.push_back(ids.shape()[1]);
    return b;
}

/// One batch through the embedder: encoder + mean pooling + L2 normalisation.
struct Embedding : headwise_bench::WorkerCase {
    headwise::models::SentenceEmbedder<float>& embedder;
    headwise::text::BertBatch batch;
    float sink = 0;

    Embedding(headwise::models::SentenceEmbedder<float>& e, headwise::text::BertBatch b)
        : embedder(e), batch(std::move(b)) {}
    void call() override { sink += embedder.embed_batch(batch).data()[0]; }
};

int worker(int threads, const std::string& dir, const std::string& weights) {
    headwise_bench::set_threads(threads);
    auto embedder = headwise::models::SentenceEmbedder<float>::from_directory(dir);
    // Inference only: the weight matrices in bf16 alone (the float ones freed).
    if (weights == "bf16")
        embedder.with_precision(headwise::Precision::bf16, headwise::FloatWeights::release);
    if (weights == "prepared") {
        embedder.with_prepared_weights();
        if (!embedder.prepared_weights())
            throw std::runtime_error("prepared: this build prepares no weights (no oneDNN)");
    }
    return headwise_bench::serve(threads, [&](std::istringstream& in) {
        std::string path;
        in >> path;
        return std::make_unique<Embedding>(embedder, read_batch(path));
    });
}

}  // namespace
#endif

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode.rfind("--benchmark_list_tests", 0) == 0) {
        std::printf("minilm/load\nminilm/b1\nminilm/b32\n");
        return 0;
    }
#if !HEADWISE_BENCH_MINILM
    std::fprintf(stderr, "bench_minilm: built without nlohmann/json or utf8proc\n");
    return 2;
#else
    try {
        if (mode == "load" && argc >= 3) return load(argv[2], argc > 3 ? std::atoi(argv[3]) : 20);
        const std::string weights = argc == 5 ? argv[4] : "";
        if (mode == "worker" &&
            (argc == 4 || (argc == 5 && (weights == "bf16" || weights == "prepared"))))
            return worker(std::atoi(argv[2]), argv[3], weights);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_minilm: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr,
                 "usage: bench_minilm load <model_dir> [repeats]\n"
                 "       bench_minilm worker <threads> <model_dir> [bf16|prepared]\n");
    return 2;
#endif
}
