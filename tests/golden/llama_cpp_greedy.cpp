// SPDX-License-Identifier: MIT
// llama_cpp_greedy: llama.cpp's greedy continuation of prompts given as token ids, for
// make_smollm2_golden.py (the reference of the quantized model's generations). Built by that
// script against llama.cpp's own library (scripts/llama_cpp.sh's build); never part of the
// headwise build.
//
//   llama_cpp_greedy MODEL.gguf N < prompts
//
// Each standard-input line is one prompt: token ids, space-separated. Each prompt runs in a fresh
// context on 1 thread: the prompt in one batch, then N tokens chosen one at a time by the largest
// logit (ties to the lower id), end-of-generation ids included (no stop). One output line per
// prompt: "greedy <n> <ids...> gaps <g1> ... <gn>" where g_i is the difference between the largest
// and the second largest logit at step i.
#include <llama.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

void quiet(ggml_log_level, const char*, void*) {}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: llama_cpp_greedy MODEL.gguf N < prompts\n");
        return 2;
    }
    const int n_new = std::stoi(argv[2]);
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (model == nullptr) {
        std::fprintf(stderr, "llama_cpp_greedy: cannot load %s\n", argv[1]);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::string line;
    while (std::getline(std::cin, line)) {
        std::vector<llama_token> tokens;
        std::istringstream words(line);
        for (long id; words >> id;) tokens.push_back(static_cast<llama_token>(id));
        if (tokens.empty()) continue;
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = static_cast<uint32_t>(tokens.size() + n_new + 16);
        cp.n_batch = cp.n_ctx;
        cp.n_threads = 1;
        cp.n_threads_batch = 1;
        cp.no_perf = true;
        llama_context* ctx = llama_init_from_model(model, cp);
        if (ctx == nullptr) {
            std::fprintf(stderr, "llama_cpp_greedy: cannot make a context\n");
            return 1;
        }
        std::vector<llama_token> out;
        std::vector<float> gaps;
        llama_batch batch = llama_batch_get_one(tokens.data(), static_cast<int32_t>(tokens.size()));
        llama_token next = 0;
        for (int step = 0; step < n_new; ++step) {
            if (llama_decode(ctx, batch) != 0) {
                std::fprintf(stderr, "llama_cpp_greedy: llama_decode failed\n");
                return 1;
            }
            const float* logits = llama_get_logits_ith(ctx, -1);
            int best = 0, second = -1;
            for (int v = 1; v < n_vocab; ++v) {
                if (logits[v] > logits[best]) {
                    second = best;
                    best = v;
                } else if (second < 0 || logits[v] > logits[second]) {
                    second = v;
                }
            }
            out.push_back(best);
            gaps.push_back(logits[best] - logits[second]);
            next = best;
            batch = llama_batch_get_one(&next, 1);
        }
        std::printf("greedy %zu", out.size());
        for (const llama_token id : out) std::printf(" %d", id);
        std::printf(" gaps");
        for (const float g : gaps) std::printf(" %.4g", g);
        std::printf("\n");
        std::fflush(stdout);
        llama_free(ctx);
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
