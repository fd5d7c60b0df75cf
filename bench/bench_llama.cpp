// SPDX-License-Identifier: MIT
// A Llama-style causal language model with headwise: the worker of bench/run.py's llama and
// smollm2 suites (timed side by side with transformers and llama.cpp), a read-bandwidth probe,
// and a breakdown of one decode step.
//
//   bench_llama worker <threads> <model> [weights]
//       loads the model: a Hugging Face directory (LlamaForCausalLM::from_pretrained) or a
//       .gguf file (LlamaForCausalLM::from_gguf; weights `stored`, the default, or `float32`),
//       then answers bench/worker_process.hpp's protocol ("info" adds load_s=<wall s of loading
//       the model>); a case is
//         setup <id> gen <prompt.txt> <new_tokens>   the prompt, then new_tokens greedy tokens
//                                                    (models::generate); "output" answers the
//                                                    last call's new ids
//         setup <id> prefill <ids.txt> <N>           one decode of the file's first N ids into an
//                                                    empty cache (all logits)
//         setup <id> last <ids.txt> <N>              the same with the last position's logits only
//                                                    (decode_last), as llama.cpp's prompt
//                                                    processing computes them
//       The ids files hold "1 L" then L token ids.
//   bench_llama bandwidth [MB]
//       single-thread read bandwidth: 9 passes summing a float array of MB megabytes (default
//       512), each timed by its thread CPU time -> "bandwidth <best bytes/s> <median bytes/s>
//       <passes> <MB>"
//   bench_llama profile <model> <cache_length> [new_tokens] [steps]
//       the median time of a decode of new_tokens (default 1) after cache_length tokens, and of
//       its parts (the layers' attention and feed-forward, the LM head) timed alone on the same
//       inputs; thread CPU times.
//   bench_llama --benchmark_list_tests=true
//       lists the cases (the build's check that the program starts).
//
// Threads: OpenBLAS's own (headwise's non-GEMM work runs on the calling thread unless the build
// uses OpenMP, whose thread count is set too).

#if __has_include(<nlohmann/json.hpp>)
#define HEADWISE_BENCH_LLAMA 1
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>
#else
#define HEADWISE_BENCH_LLAMA 0
#endif
#include <headwise/detail/parallel.hpp>  // HEADWISE_PARALLEL, <omp.h> when set
#include <headwise/ops/gemm.hpp>         // HEADWISE_GEMM_CBLAS, <cblas.h> when set

#include "worker_process.hpp"  // serve, WorkerCase, cpu_now, set_threads, median

#include <Eigen/Core>

#include <algorithm>  // std::copy, std::max_element
#include <chrono>     // std::chrono::steady_clock
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf
#include <cstdlib>    // std::atoi, std::atol
#include <fstream>    // std::ifstream
#include <memory>     // std::unique_ptr
#include <sstream>    // std::istringstream, std::ostringstream
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::getline
#include <vector>     // std::vector

namespace {

using Clock = std::chrono::steady_clock;
using headwise_bench::cpu_now;
using headwise_bench::median;
using headwise_bench::set_threads;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double cpu_since(double t0) { return cpu_now() - t0; }

/// Sums of a float array far larger than the caches, one thread, timed by its CPU time; Eigen's
/// vectorised reduction keeps several accumulators, so the loop is bound by the loads.
int bandwidth(long megabytes) {
    const Eigen::Index n = static_cast<Eigen::Index>(megabytes) * (1 << 20) / 4;
    Eigen::VectorXf a = Eigen::VectorXf::Constant(n, 1.0f);
    std::vector<double> rates;
    float sink = 0;
    constexpr int kPasses = 9;
    for (int r = 0; r < kPasses + 1; ++r) {
        const double t0 = cpu_now();
        sink += a.sum();
        if (r > 0) rates.push_back(static_cast<double>(n) * 4 / cpu_since(t0));  // 0 warms up
    }
    std::printf("bandwidth %.6g %.6g %d %ld\n", *std::max_element(rates.begin(), rates.end()),
                median(rates), kPasses, megabytes);
    return sink == 1.0f ? 1 : 0;  // keeps the sums observable
}

}  // namespace

#if HEADWISE_BENCH_LLAMA
namespace {

using headwise::Index;
using headwise::Tensor;
using Model = headwise::models::LlamaForCausalLM<float>;

std::vector<std::int64_t> read_ids(const std::string& path) {
    std::ifstream in(path);
    Index B = 0, L = 0;
    if (!(in >> B >> L) || B != 1 || L <= 0)
        throw std::runtime_error(path + ": expected \"1 L\" then L token ids");
    std::vector<std::int64_t> ids(static_cast<std::size_t>(L));
    for (auto& id : ids)
        if (!(in >> id)) throw std::runtime_error(path + ": too few token ids");
    return ids;
}

Tensor<std::int64_t> as_batch(const std::vector<std::int64_t>& ids) {
    Tensor<std::int64_t> t(headwise::Shape{1, static_cast<Index>(ids.size())});
    std::copy(ids.begin(), ids.end(), t.data());
    return t;
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// A Hugging Face directory or a GGUF file, with the GGUF's weights stored or float32.
Model load_model(const std::string& path, const std::string& weights) {
    if (!ends_with(path, ".gguf")) return Model::from_pretrained(path);
    if (weights != "stored" && weights != "float32")
        throw std::runtime_error("weights: expected stored or float32, got " + weights);
    return Model::from_gguf(path, weights == "stored" ? headwise::models::GgufWeights::stored
                                                      : headwise::models::GgufWeights::float32);
}

/// A generation of new_tokens greedy tokens after a prompt (models::generate).
struct Generation : headwise_bench::WorkerCase {
    Model& model;
    std::vector<std::int64_t> prompt, last;
    headwise::models::GenerationOptions options;

    Generation(Model& m, std::vector<std::int64_t> ids, Index new_tokens)
        : model(m), prompt(std::move(ids)) {
        options.max_new_tokens = new_tokens;  // greedy, no stop token
    }
    void call() override { last = headwise::models::generate(model, {prompt}, options)[0]; }
    std::string output() const override {
        std::ostringstream out;
        for (std::size_t i = 0; i < last.size(); ++i) out << (i ? " " : "") << last[i];
        return out.str();
    }
};

/// One decode of a batch of ids into an empty cache: all logits, or the last position's.
struct Prefill : headwise_bench::WorkerCase {
    Model& model;
    Tensor<std::int64_t> ids;
    bool last_only;
    float sink = 0;

    Prefill(Model& m, Tensor<std::int64_t> batch, bool last)
        : model(m), ids(std::move(batch)), last_only(last) {}
    void call() override {
        auto cache = model.make_cache(1, ids.shape()[1]);
        sink += last_only ? model.decode_last(ids.view(), cache, {}).data()[0]
                          : model.decode(ids.view(), cache, {}).data()[0];
    }
};

std::unique_ptr<headwise_bench::WorkerCase> make_case(Model& model, std::istringstream& in) {
    std::string kind, path;
    long n = 0;
    if (!(in >> kind >> path >> n) || n <= 0)
        throw std::runtime_error("setup: expected <gen|prefill|last> <ids.txt> <count>");
    const std::vector<std::int64_t> ids = read_ids(path);
    if (kind == "gen") return std::make_unique<Generation>(model, ids, n);
    if (kind != "prefill" && kind != "last")
        throw std::runtime_error("setup: expected gen, prefill or last, got " + kind);
    if (n > static_cast<long>(ids.size()))
        throw std::runtime_error("setup: " + path + " holds " + std::to_string(ids.size()) +
                                 " ids, fewer than " + std::to_string(n));
    return std::make_unique<Prefill>(model, as_batch({ids.begin(), ids.begin() + n}),
                                     kind == "last");
}

int worker(int threads, const std::string& path, const std::string& weights) {
    set_threads(threads);
    const auto load_start = Clock::now();
    Model model = load_model(path, weights);
    std::ostringstream info;
    info << "load_s=" << seconds_since(load_start);
    return headwise_bench::serve(
        threads, [&](std::istringstream& in) { return make_case(model, in); }, info.str());
}

/// One decode step at a cache of `n` tokens, whole and in parts (each part on the input the
/// step gives it), median over `steps` repetitions; the cache is truncated back after each.
int profile(const std::string& path, Index n, Index t, int steps) {
    set_threads(1);
    Model model = load_model(path, "stored");
    const Index V = model.config().vocab_size;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n + t));
    for (std::size_t i = 0; i < ids.size(); ++i)
        ids[i] = static_cast<std::int64_t>(i * 7919 % 31000 + 3);
    auto cache = model.make_cache(1, n + t);
    if (n > 0) {
        const Tensor<std::int64_t> prefix = as_batch({ids.begin(), ids.begin() + n});
        (void)model.decode(prefix.view(), cache, {});
    }
    const Tensor<std::int64_t> token = as_batch({ids.begin() + n, ids.end()});
    auto& layers = model.model().layers();
    std::vector<double> whole, body, attn, mlp;
    float sink = 0;
    const auto back = [&] {
        for (auto& c : cache.layers) c.truncate(n);
    };
    for (int s = 0; s < steps; ++s) {
        auto t0 = cpu_now();
        sink += model.decode(token.view(), cache, {}).data()[V - 1];
        whole.push_back(cpu_since(t0));
        back();
        t0 = cpu_now();
        sink += model.model().decode(token.view(), cache, {}).data()[0];
        body.push_back(cpu_since(t0));
        back();
        // The layers' parts alone, each on the previous part's output.
        Tensor<float> x = model.model().embed_tokens().forward(token.view());
        double ta = 0, tm = 0;
        for (std::size_t i = 0; i < layers.size(); ++i) {
            auto t1 = cpu_now();
            Tensor<float> h = layers[i].self_attn().decode(x, cache.layers[i], {});
            ta += cpu_since(t1);
            t1 = cpu_now();
            x = layers[i].mlp().forward(h).output;
            tm += cpu_since(t1);
        }
        back();
        attn.push_back(ta);
        mlp.push_back(tm);
        sink += x.data()[0];
    }
    const double h = median(whole) - median(body);
    const double w = median(whole), a = median(attn), m = median(mlp);
    std::printf("decode of %ld tokens after %ld: %.2f ms\n", static_cast<long>(t),
                static_cast<long>(n), 1e3 * w);
    std::printf("  self-attention (q/k/v/o projections, RoPE, cache): %.2f ms\n", 1e3 * a);
    std::printf("  SwiGLU feed-forward: %.2f ms\n", 1e3 * m);
    std::printf("  LM head (step - step without it): %.2f ms\n", 1e3 * h);
    std::printf("  the rest (embedding, RMSNorms, residuals): %.2f ms\n", 1e3 * (w - a - m - h));
    return sink == 12345.0f ? 1 : 0;
}

}  // namespace
#endif

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode.rfind("--benchmark_list_tests", 0) == 0) {
        std::printf("llama/bandwidth\nllama/worker\nllama/profile\n");
        return 0;
    }
    if (mode == "bandwidth") return bandwidth(argc > 2 ? std::atol(argv[2]) : 512);
#if !HEADWISE_BENCH_LLAMA
    std::fprintf(stderr, "bench_llama: built without nlohmann/json\n");
    return 2;
#else
    try {
        if (mode == "worker" && (argc == 4 || argc == 5))
            return worker(std::atoi(argv[2]), argv[3], argc == 5 ? argv[4] : "stored");
        if (mode == "profile" && argc >= 4)
            return profile(argv[2], std::atol(argv[3]), argc > 4 ? std::atol(argv[4]) : 1,
                           argc > 5 ? std::atoi(argv[5]) : 21);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_llama: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr,
                 "usage: bench_llama worker <threads> <model> [stored|float32]\n"
                 "       bench_llama bandwidth [MB]\n"
                 "       bench_llama profile <model> <cache_length> [new_tokens] [steps]\n");
    return 2;
#endif
}
