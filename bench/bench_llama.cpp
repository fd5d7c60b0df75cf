// SPDX-License-Identifier: MIT
// A Llama-style causal language model with headwise: a worker that bench/llama_peers.py drives
// side by side with transformers (greedy generation, prefill), a read-bandwidth probe, and a
// breakdown of one decode step.
//
//   bench_llama worker <model> <threads> <prompt.txt> <prefill.txt> <new_tokens> [weights]
//       loads the model: a Hugging Face directory (LlamaForCausalLM::from_pretrained) or a
//       .gguf file (LlamaForCausalLM::from_gguf; weights `stored`, the default, or `float32`),
//       then answers lines on stdin:
//         run gen <calls>     the prompt, then <new_tokens> greedy tokens (models::generate)
//         run p128 <calls>    one decode of the prompt into an empty cache (all logits)
//         run p<N> <calls>    the same for the first N of the prefill ids (p2048, p512, ...)
//         run last<N> <calls> the same with the last position's logits only (decode_last), as
//                             llama.cpp's prompt processing computes them
//                             -> "time <median wall s> <median CPU s>" per call
//                                (CPU: the calling thread's, where the one BLAS thread runs)
//         ids                 -> "ids <the last generation's new ids>"
//         mem                 -> "mem <peak RSS kB (VmHWM)> <RSS kB before the model>"
//         load                -> "load <wall s of loading the model>"
//         quit
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

#include "worker_process.hpp"  // status_kb, set_threads, median

#include <Eigen/Core>

#include <time.h>     // clock_gettime, CLOCK_THREAD_CPUTIME_ID
#include <algorithm>  // std::sort
#include <chrono>     // std::chrono::steady_clock
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf
#include <cstdlib>    // std::atoi, std::atol
#include <fstream>    // std::ifstream
#include <iostream>   // std::cin, std::cout
#include <map>        // std::map
#include <sstream>    // std::istringstream
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::getline
#include <vector>     // std::vector

namespace {

using Clock = std::chrono::steady_clock;
using headwise_bench::median;
using headwise_bench::set_threads;
using headwise_bench::status_kb;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// CPU time of the calling thread (the BLAS runs on it with one thread): figures stay
/// comparable when other processes share the cores.
double cpu_now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
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

int worker(const std::string& path, int threads, const std::string& prompt_path,
           const std::string& prefill_path, Index new_tokens, const std::string& weights) {
    set_threads(threads);
    const long baseline = status_kb("VmRSS");
    const auto load_start = Clock::now();
    Model model = load_model(path, weights);
    const double load_seconds = seconds_since(load_start);
    const std::vector<std::int64_t> prompt = read_ids(prompt_path);
    const Tensor<std::int64_t> prompt_batch = as_batch(prompt);
    const std::vector<std::int64_t> prefill_ids = read_ids(prefill_path);
    std::map<std::string, Tensor<std::int64_t>> prefills;  // "p<N>": the first N prefill ids
    const auto prefill_of = [&](const std::string& which) -> const Tensor<std::int64_t>& {
        if (which == "p128") return prompt_batch;
        auto it = prefills.find(which);
        if (it != prefills.end()) return it->second;
        const long n = which.size() > 1 ? std::atol(which.c_str() + 1) : 0;
        if (which[0] != 'p' || n <= 0 || n > static_cast<long>(prefill_ids.size()))
            throw std::runtime_error("unknown case " + which + " (gen, p128 or p<N>, N <= " +
                                     std::to_string(prefill_ids.size()) + ")");
        return prefills.emplace(which, as_batch({prefill_ids.begin(), prefill_ids.begin() + n}))
            .first->second;
    };
    headwise::models::GenerationOptions options;
    options.max_new_tokens = new_tokens;  // greedy, no stop token
    std::vector<std::int64_t> last;
    float sink = 0;
    const auto gen = [&] { last = headwise::models::generate(model, {prompt}, options)[0]; };
    const auto prefill = [&](const Tensor<std::int64_t>& ids) {
        auto cache = model.make_cache(1, ids.shape()[1]);
        sink += model.decode(ids.view(), cache, {}).data()[0];
    };
    const auto prefill_last = [&](const Tensor<std::int64_t>& ids) {  // the last logits only
        auto cache = model.make_cache(1, ids.shape()[1]);
        sink += model.decode_last(ids.view(), cache, {}).data()[0];
    };
    gen();  // warm-up
    prefill(prompt_batch);
    std::cout << "ready" << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd, which;
        int calls = 0;
        in >> cmd >> which >> calls;
        if (cmd == "quit") break;
        if (cmd == "mem") {
            std::cout << "mem " << status_kb("VmHWM") << " " << baseline << std::endl;
            continue;
        }
        if (cmd == "load") {
            std::cout << "load " << load_seconds << std::endl;
            continue;
        }
        if (cmd == "ids") {
            std::cout << "ids";
            for (std::int64_t id : last) std::cout << ' ' << id;
            std::cout << std::endl;
            continue;
        }
        std::vector<double> times, cpu;
        for (int c = 0; c < calls; ++c) {
            const auto t0 = Clock::now();
            const double c0 = cpu_now();
            if (which == "gen")
                gen();
            else if (which.rfind("last", 0) == 0)
                prefill_last(prefill_of("p" + which.substr(4)));
            else
                prefill(prefill_of(which));
            times.push_back(seconds_since(t0));
            cpu.push_back(cpu_since(c0));
        }
        std::cout << "time " << median(times) << ' ' << median(cpu) << std::endl;
    }
    return sink == 12345.0f ? 1 : 0;  // keeps the results observable
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
        if (mode == "worker" && (argc == 7 || argc == 8))
            return worker(argv[2], std::atoi(argv[3]), argv[4], argv[5], std::atol(argv[6]),
                          argc == 8 ? argv[7] : "stored");
        if (mode == "profile" && argc >= 4)
            return profile(argv[2], std::atol(argv[3]), argc > 4 ? std::atol(argv[4]) : 1,
                           argc > 5 ? std::atoi(argv[5]) : 21);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_llama: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr,
                 "usage: bench_llama worker <model> <threads> <prompt.txt> <prefill.txt> "
                 "<new_tokens> [stored|float32]\n"
                 "       bench_llama bandwidth [MB]\n"
                 "       bench_llama profile <model> <cache_length> [new_tokens] [steps]\n");
    return 2;
#endif
}
