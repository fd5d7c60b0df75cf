// SPDX-License-Identifier: MIT
// llama_heads: which attention heads of a Llama-family causal LM (SmolLM2-135M-Instruct) matter
// for its perplexity, and what pruning the others costs and gains.
//
//   llama_heads MODEL.gguf TEXTFILE [--importance gradient|differences] [--windows W]
//               [--window-tokens C] [--layers K] [--step H] [--check-heads M] [--context N]
//               [--eval-windows E] [--draws D] [--seed S] [--speed-rounds R]
//               [--prefill-tokens P] [--decode-tokens T] [--csv FILE] [--threads N]
//
// The text is tokenized as the perplexity program does (BOS when the model adds it, one final
// newline dropped) and split in two: the first W windows of C tokens (default 16 of 64) score
// the heads, the tokens after them measure the pruned models (E windows of N, default 4 of 256,
// models::perplexity: llama-perplexity's windows, second halves scored). Two parts, so that the
// heads are not chosen on the very tokens that judge the choice.
// Loss: window w's mean next-token cross entropy L_w (every position, first token BOS).
// Importance (Michel et al. 2019): I_h = mean_w |d L_w / d xi_h| at xi = 1, xi_h the gate of
// head h (LlamaModel's head_mask), weights dequantized to float (GgufWeights::float32). With
// gradient (the default), from the gates' gradient that LlamaForCausalLM::backward returns: one
// forward and backward per window; M heads (default 6) spread over the layers are also scored by
// central differences and the two printed side by side. With differences, by central differences
// with step H (default 1e-2) alone: two forwards of the W windows per head. Only the first K
// layers' heads are scored and pruned with --layers K (default all). Printed as a table, written
// as CSV with --csv (heatmap.py draws it).
// Pruning: 10, 25 and 50% of the scored query heads, the least important first and in D random
// orders (default 3, seeded). Grouped-query attention: a key/value head goes only with its whole
// group, and a layer's remaining groups keep equally many query heads (LlamaModel::prune_heads),
// so a layer loses 0, G, ... heads in the shapes that allows; among those, the heads pruned are
// the ones of the smallest total score (choose_heads). Each pruned model's perplexity on the
// evaluation tokens, float32 and quantized to Q4_1 after pruning, then the prefill and decode
// speed of the models pruned by importance against the unpruned ones (a warm-up round, then R
// rounds alternating, default 5, the medians; the machine's load average printed beside them).
#include <headwise/headwise.hpp>
#include <headwise/io/gguf.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/models/perplexity.hpp>
#include <headwise/text/pretrained_tokenizer.hpp>

#include <algorithm>  // std::sort, std::stable_sort, std::min, std::max, std::copy_n, std::fill_n
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::exp, std::log, std::abs, std::lround
#include <cstdint>    // std::int64_t, std::uint64_t
#include <cstdio>     // std::printf, std::fprintf, std::fputs
#include <cstdlib>    // std::strtod, std::strtoll
#include <exception>  // std::exception
#include <fstream>    // std::ifstream
#include <iterator>   // std::istreambuf_iterator
#include <limits>     // std::numeric_limits
#include <map>        // std::map
#include <numeric>    // std::iota
#include <random>     // std::mt19937_64, std::uniform_real_distribution
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::to_string
#include <utility>    // std::pair, std::move
#include <vector>     // std::vector

#include "heads_report.hpp"

namespace {

using headwise::Index;
using headwise::Tensor;
using headwise::models::HeadsToPrune;
using Model = headwise::models::LlamaForCausalLM<float>;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: llama_heads MODEL.gguf TEXTFILE [--importance gradient|differences] [--windows W]\n"
    "                   [--window-tokens C] [--layers K] [--step H] [--check-heads M]\n"
    "                   [--context N] [--eval-windows E] [--draws D] [--seed S]\n"
    "                   [--speed-rounds R] [--prefill-tokens P] [--decode-tokens T]\n"
    "                   [--csv FILE] [--threads N]\n";

void set_threads(int n) {
#if HEADWISE_PARALLEL
    omp_set_num_threads(n);
#endif
#if defined(HEADWISE_USE_CBLAS) && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(n);
#endif
    static_cast<void>(n);
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// The 1-minute load average (/proc/loadavg), -1 when it cannot be read.
double load_average() {
    std::ifstream in("/proc/loadavg");
    double load = -1;
    in >> load;
    return in ? load : -1;
}

// L of one window: the mean over positions t < C - 1 of -log softmax(logits_t)[ids[t + 1]],
// logits [C, V]; in double, the row maximum subtracted so that no exp overflows. With `grad`
// ([C, V]), d L / d logits written into it: (softmax(logits_t) - onehot(ids[t + 1])) / (C - 1),
// zero in the last row (it predicts nothing).
double window_loss(const float* logits, const std::int64_t* ids, Index C, Index V, float* grad) {
    double loss = 0;
    const double n = static_cast<double>(C - 1);
    for (Index t = 0; t + 1 < C; ++t) {
        const float* row = logits + t * V;
        double top = row[0];
        for (Index v = 1; v < V; ++v) top = std::max(top, static_cast<double>(row[v]));
        double sum = 0;
        for (Index v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - top);
        loss += top + std::log(sum) - row[ids[t + 1]];
        if (grad != nullptr) {
            for (Index v = 0; v < V; ++v)
                grad[t * V + v] =
                    static_cast<float>(std::exp(static_cast<double>(row[v]) - top) / sum / n);
            grad[t * V + ids[t + 1]] -= static_cast<float>(1.0 / n);
        }
    }
    if (grad != nullptr) std::fill_n(grad + (C - 1) * V, V, 0.0f);
    return loss / n;
}

// L_w of each window of `windows` [W, C] under the gates head_mask [N, H] (empty: none).
std::vector<double> window_losses(Model& model, const Tensor<std::int64_t>& windows,
                                  const Tensor<float>& head_mask) {
    const Index W = windows.shape()[0], C = windows.shape()[1], V = model.config().vocab_size;
    headwise::models::HeadOptions<float> heads;
    if (head_mask.numel() > 0) heads.head_mask = head_mask;
    const Tensor<float> logits = model.forward_train(windows, {}, heads).logits;  // [W, C, V]
    std::vector<double> loss(static_cast<std::size_t>(W));
    for (Index w = 0; w < W; ++w)
        loss[static_cast<std::size_t>(w)] =
            window_loss(logits.data() + w * C * V, windows.data() + w * C, C, V, nullptr);
    return loss;
}

// mean_w |d L_w / d xi_h| at xi = 1 of each head (layer, head) of `heads`, by central
// differences of step `step` in its gate: two forwards of the windows per head.
std::vector<double> importance_by_differences(Model& model, const Tensor<std::int64_t>& windows,
                                              const std::vector<std::pair<Index, Index>>& heads,
                                              double step) {
    const Index N = model.config().num_hidden_layers, H = model.config().num_attention_heads;
    const Index W = windows.shape()[0];
    Tensor<float> gates(headwise::Shape{N, H});
    for (Index k = 0; k < N * H; ++k) gates.data()[k] = 1.0f;
    // The steps as float holds them: 1 + step is rounded.
    const double width = static_cast<double>(static_cast<float>(1.0 + step)) -
                         static_cast<double>(static_cast<float>(1.0 - step));
    std::vector<double> importance;
    for (const auto& [l, h] : heads) {
        gates(l, h) = static_cast<float>(1.0 + step);
        const std::vector<double> up = window_losses(model, windows, gates);
        gates(l, h) = static_cast<float>(1.0 - step);
        const std::vector<double> down = window_losses(model, windows, gates);
        gates(l, h) = 1.0f;
        double sum = 0;
        for (Index w = 0; w < W; ++w)
            sum += std::abs(up[static_cast<std::size_t>(w)] - down[static_cast<std::size_t>(w)]);
        importance.push_back(sum / width / static_cast<double>(W));
    }
    return importance;
}

// I [N, H]: mean_w |d L_w / d xi_h| at xi = 1 of every head, from the gates' gradient that
// backward returns (LlamaForCausalLM::forward_train with head_mask_grad): one forward and one
// backward per window.
Tensor<double> importance_by_gradient(Model& model, const Tensor<std::int64_t>& windows) {
    const Index N = model.config().num_hidden_layers, H = model.config().num_attention_heads;
    const Index W = windows.shape()[0], C = windows.shape()[1], V = model.config().vocab_size;
    Tensor<double> importance(headwise::Shape{N, H});
    model.train();
    Tensor<std::int64_t> ids(headwise::Shape{1, C});
    Tensor<float> grad(headwise::Shape{1, C, V});
    for (Index w = 0; w < W; ++w) {
        std::copy_n(windows.data() + w * C, C, ids.data());
        const auto f = model.forward_train(ids, {}, {}, /*head_mask_grad=*/true);
        window_loss(f.logits.data(), ids.data(), C, V, grad.data());
        const auto g = model.backward(f, grad);
        for (Index k = 0; k < N * H; ++k)
            importance.data()[k] +=
                std::abs(static_cast<double>(g.head_mask.data()[k])) / static_cast<double>(W);
    }
    model.zero_grad();
    model.eval();
    return importance;
}

// The heads to prune from the first K layers' H heads each (G = H / Hkv per key/value head):
// `count` of them (or the attainable count nearest to it), of the smallest total score. A layer
// may lose r whole groups and G - c heads of each other group (1 <= c <= G), the ones of the
// smallest scores: the shapes prune_heads accepts. Exact for additive scores: per layer the
// cheapest shape of each size, then over the layers a knapsack on the sizes.
HeadsToPrune choose_heads(const Tensor<double>& score, Index count, Index Hkv) {
    const Index K = score.shape()[0], H = score.shape()[1], G = H / Hkv;
    struct Cut {
        double cost = std::numeric_limits<double>::infinity();
        Index keep = 0, removed_groups = 0;  // c, r
    };
    // For each layer, the cheapest shape of each size 0..H.
    std::vector<std::vector<Cut>> best(static_cast<std::size_t>(K),
                                       std::vector<Cut>(static_cast<std::size_t>(H + 1)));
    std::vector<std::vector<Index>> sorted(static_cast<std::size_t>(K * Hkv));  // group's heads
    for (Index l = 0; l < K; ++l) {
        for (Index j = 0; j < Hkv; ++j) {
            std::vector<Index>& s = sorted[static_cast<std::size_t>(l * Hkv + j)];
            s.resize(static_cast<std::size_t>(G));
            std::iota(s.begin(), s.end(), j * G);
            std::stable_sort(s.begin(), s.end(),
                             [&](Index a, Index b) { return score(l, a) < score(l, b); });
        }
        best[static_cast<std::size_t>(l)][0] = {0.0, G, 0};
        for (Index c = 1; c <= G; ++c) {
            // partial: the group's G - c smallest; full - partial: what removing it adds.
            std::vector<std::pair<double, Index>> extra;
            double partial_sum = 0;
            for (Index j = 0; j < Hkv; ++j) {
                const std::vector<Index>& s = sorted[static_cast<std::size_t>(l * Hkv + j)];
                double partial = 0, full = 0;
                for (Index i = 0; i < G; ++i) {
                    full += score(l, s[static_cast<std::size_t>(i)]);
                    if (i < G - c) partial += score(l, s[static_cast<std::size_t>(i)]);
                }
                partial_sum += partial;
                extra.emplace_back(full - partial, j);
            }
            std::stable_sort(extra.begin(), extra.end());
            double cost = partial_sum;
            for (Index r = 0; r < Hkv; ++r) {  // r groups gone, Hkv - r keep c heads each
                if (r > 0) cost += extra[static_cast<std::size_t>(r - 1)].first;
                const Index size = r * G + (Hkv - r) * (G - c);
                Cut& b = best[static_cast<std::size_t>(l)][static_cast<std::size_t>(size)];
                if (cost < b.cost) b = {cost, c, r};
            }
        }
    }
    // Knapsack over the layers: total[l][n], the cheapest n heads from layers < l.
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> total(
        static_cast<std::size_t>(K + 1),
        std::vector<double>(static_cast<std::size_t>(K * H + 1), inf));
    std::vector<std::vector<Index>> size_of(
        static_cast<std::size_t>(K), std::vector<Index>(static_cast<std::size_t>(K * H + 1), 0));
    total[0][0] = 0;
    for (Index l = 0; l < K; ++l)
        for (Index n = 0; n <= l * H; ++n) {
            const double before = total[static_cast<std::size_t>(l)][static_cast<std::size_t>(n)];
            if (before == inf) continue;
            for (Index s = 0; s <= H; ++s) {
                const double c =
                    best[static_cast<std::size_t>(l)][static_cast<std::size_t>(s)].cost;
                double& after =
                    total[static_cast<std::size_t>(l + 1)][static_cast<std::size_t>(n + s)];
                if (c < inf && before + c < after) {
                    after = before + c;
                    size_of[static_cast<std::size_t>(l)][static_cast<std::size_t>(n + s)] = s;
                }
            }
        }
    Index target = -1;
    for (Index n = 0; n <= K * H; ++n)
        if (total[static_cast<std::size_t>(K)][static_cast<std::size_t>(n)] < inf &&
            (target < 0 || std::abs(n - count) < std::abs(target - count)))
            target = n;
    HeadsToPrune chosen;
    for (Index l = K - 1, n = target; l >= 0; --l) {
        const Index s = size_of[static_cast<std::size_t>(l)][static_cast<std::size_t>(n)];
        n -= s;
        if (s == 0) continue;
        const Cut& b = best[static_cast<std::size_t>(l)][static_cast<std::size_t>(s)];
        std::vector<std::pair<double, Index>> extra;  // the removed groups, as chosen above
        for (Index j = 0; j < Hkv; ++j) {
            const std::vector<Index>& s_j = sorted[static_cast<std::size_t>(l * Hkv + j)];
            double full = 0, partial = 0;
            for (Index i = 0; i < G; ++i) {
                full += score(l, s_j[static_cast<std::size_t>(i)]);
                if (i < G - b.keep) partial += score(l, s_j[static_cast<std::size_t>(i)]);
            }
            extra.emplace_back(full - partial, j);
        }
        std::stable_sort(extra.begin(), extra.end());
        std::vector<bool> gone(static_cast<std::size_t>(Hkv), false);
        for (Index r = 0; r < b.removed_groups; ++r)
            gone[static_cast<std::size_t>(extra[static_cast<std::size_t>(r)].second)] = true;
        std::vector<Index>& list = chosen[l];
        for (Index j = 0; j < Hkv; ++j) {
            const std::vector<Index>& s_j = sorted[static_cast<std::size_t>(l * Hkv + j)];
            const Index take = gone[static_cast<std::size_t>(j)] ? G : G - b.keep;
            list.insert(list.end(), s_j.begin(), s_j.begin() + take);
        }
        std::sort(list.begin(), list.end());
    }
    return chosen;
}

// Query heads and whole key/value groups in a pruning.
std::pair<Index, Index> pruned_counts(const HeadsToPrune& heads, Index G) {
    Index q = 0, kv = 0;
    for (const auto& [layer, list] : heads) {
        q += static_cast<Index>(list.size());
        std::map<Index, Index> per_group;
        for (Index h : list) ++per_group[h / G];
        for (const auto& [group, n] : per_group) kv += n == G ? 1 : 0;
    }
    return {q, kv};
}

// Prefill and decode speed of one model: P tokens in one decode call into a fresh cache, then T
// tokens one at a time; tokens per second of each.
std::pair<double, double> speed(Model& model, const std::vector<std::int64_t>& tokens, Index P,
                                Index T) {
    auto cache = model.make_cache(1, P + T);
    Tensor<std::int64_t> prompt(headwise::Shape{1, P});
    for (Index t = 0; t < P; ++t) prompt.data()[t] = tokens[static_cast<std::size_t>(t)];
    const Clock::time_point start = Clock::now();
    model.decode_last(prompt, cache);
    const double prefill = seconds_since(start);
    Tensor<std::int64_t> next(headwise::Shape{1, 1});
    const Clock::time_point decoding = Clock::now();
    for (Index t = 0; t < T; ++t) {
        next.data()[0] = tokens[static_cast<std::size_t>(P + t)];
        model.decode_last(next, cache);
    }
    return {static_cast<double>(P) / prefill, static_cast<double>(T) / seconds_since(decoding)};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open the file");
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!text.empty() && text.back() == '\n') text.pop_back();  // as the perplexity program
    return text;
}

struct Options {
    Index windows = 16, window_tokens = 64, layers = 0, context = 256, eval_windows = 4;
    Index draws = 3, seed = 1, speed_rounds = 5, prefill_tokens = 128, decode_tokens = 64;
    Index threads = 1, check_heads = 6;
    double step = 1e-2;
    bool gradient = true;  // --importance gradient (else differences)
    std::string csv;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fputs(kUsage, stderr);
        return 2;
    }
    const std::string model_path = argv[1], text_path = argv[2];
    Options o;
    const std::map<std::string, Index*> integers = {{"--windows", &o.windows},
                                                    {"--window-tokens", &o.window_tokens},
                                                    {"--layers", &o.layers},
                                                    {"--context", &o.context},
                                                    {"--eval-windows", &o.eval_windows},
                                                    {"--draws", &o.draws},
                                                    {"--seed", &o.seed},
                                                    {"--speed-rounds", &o.speed_rounds},
                                                    {"--prefill-tokens", &o.prefill_tokens},
                                                    {"--decode-tokens", &o.decode_tokens},
                                                    {"--threads", &o.threads},
                                                    {"--check-heads", &o.check_heads}};
    for (int i = 3; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "llama_heads: unknown option or missing value: %s\n%s",
                         arg.c_str(), kUsage);
            return 2;
        }
        const char* value = argv[++i];
        char* end = nullptr;
        bool ok = true;
        const char* expected = "a non-negative number";
        if (arg == "--csv") {
            o.csv = value;
        } else if (arg == "--importance") {
            o.gradient = std::string(value) == "gradient";
            ok = o.gradient || std::string(value) == "differences";
            expected = "gradient or differences";
        } else if (arg == "--step") {
            o.step = std::strtod(value, &end);
            ok = *end == '\0' && o.step > 0 && o.step < 0.5;
        } else if (const auto it = integers.find(arg); it != integers.end()) {
            *it->second = std::strtoll(value, &end, 10);
            ok = *end == '\0' && *it->second >= 0;
        } else {
            std::fprintf(stderr, "llama_heads: unknown option %s\n%s", arg.c_str(), kUsage);
            return 2;
        }
        if (!ok) {
            std::fprintf(stderr, "llama_heads: %s needs %s, got \"%.40s\"\n%s", arg.c_str(),
                         expected, value, kUsage);
            return 2;
        }
    }
    if (o.windows < 1 || o.window_tokens < 2 || o.context < 3 || o.eval_windows < 2 ||
        o.threads < 1) {
        std::fprintf(stderr,
                     "llama_heads: needs --windows >= 1, --window-tokens >= 2, --context >= 3, "
                     "--eval-windows >= 2 and --threads >= 1\n%s",
                     kUsage);
        return 2;
    }
    set_threads(static_cast<int>(o.threads));

    try {
        const headwise::io::GgufFile file = headwise::io::load_gguf(model_path);
        const auto tokenizer = headwise::text::PretrainedTokenizer::from_gguf(file);
        const std::vector<std::int64_t> tokens = tokenizer.tokenizer().encode(
            read_text(text_path), /*add_special=*/true, /*parse_special=*/false);
        const Index W = o.windows, C = o.window_tokens, Nctx = o.context;
        const Index eval_size = o.eval_windows * Nctx;
        const Index needed = W * C + std::max(eval_size, o.prefill_tokens + o.decode_tokens);
        if (static_cast<Index>(tokens.size()) < needed) {
            std::fprintf(stderr,
                         "llama_heads: %s: tokenizes to %zu tokens; %lld windows of %lld and "
                         "%lld of %lld need %lld\n",
                         text_path.c_str(), tokens.size(), static_cast<long long>(W),
                         static_cast<long long>(C), static_cast<long long>(o.eval_windows),
                         static_cast<long long>(Nctx), static_cast<long long>(needed));
            return 1;
        }
        Model model = Model::from_gguf(file, headwise::models::GgufWeights::float32);
        const Index N = model.config().num_hidden_layers, H = model.config().num_attention_heads;
        const Index Hkv = model.config().num_key_value_heads, G = H / Hkv;
        const Index K = o.layers == 0 ? N : std::min<Index>(o.layers, N);

        // The scoring windows [W, C], each starting with BOS when the model adds it.
        Tensor<std::int64_t> windows(headwise::Shape{W, C});
        for (Index k = 0; k < W * C; ++k) windows.data()[k] = tokens[static_cast<std::size_t>(k)];
        if (tokenizer.add_bos() && tokenizer.bos_id())
            for (Index w = 0; w < W; ++w) windows(w, 0) = *tokenizer.bos_id();
        // The evaluation tokens: after the scoring ones.
        const std::vector<std::int64_t> evaluation(tokens.begin() + W * C,
                                                   tokens.begin() + W * C + eval_size);
        headwise::models::PerplexityOptions ppl;
        ppl.context = Nctx;
        if (tokenizer.add_bos()) ppl.bos_id = tokenizer.bos_id();

        std::printf("%s: %lld layers x %lld query heads (%lld key/value heads); %zu tokens\n",
                    model_path.c_str(), static_cast<long long>(N), static_cast<long long>(H),
                    static_cast<long long>(Hkv), tokens.size());
        std::printf(
            "scoring: tokens 0..%lld (%lld windows of %lld); evaluation: tokens %lld..%lld "
            "(%lld windows of %lld, second halves scored)\n",
            static_cast<long long>(W * C - 1), static_cast<long long>(W), static_cast<long long>(C),
            static_cast<long long>(W * C), static_cast<long long>(W * C + eval_size - 1),
            static_cast<long long>(o.eval_windows), static_cast<long long>(Nctx));

        double base_loss = 0;
        for (double l : window_losses(model, windows, {})) base_loss += l / static_cast<double>(W);
        Tensor<double> importance(headwise::Shape{K, H});
        const double scoring_load = load_average();
        const Clock::time_point scoring = Clock::now();
        if (o.gradient) {
            const Tensor<double> all = importance_by_gradient(model, windows);  // [N, H]
            std::copy_n(all.data(), K * H, importance.data());
            std::printf(
                "loss %.6f at xi = 1; %lld heads scored by backward (%lld windows, a forward and a "
                "backward each) "
                "in %.1f s, %lld thread(s), load average %.1f before\n",
                base_loss, static_cast<long long>(K * H), static_cast<long long>(W),
                seconds_since(scoring), static_cast<long long>(o.threads), scoring_load);
            // A few heads, spread over the layers, by central differences too.
            std::vector<std::pair<Index, Index>> checked;
            for (Index k = 0; k < std::min<Index>(o.check_heads, K * H); ++k) {
                const Index i = k * (K * H) / std::min<Index>(o.check_heads, K * H);
                checked.emplace_back(i / H, i % H);
            }
            const Clock::time_point differences = Clock::now();
            const std::vector<double> by_differences =
                importance_by_differences(model, windows, checked, o.step);
            double top = 0, worst = 0;
            for (Index k = 0; k < K * H; ++k) top = std::max(top, importance.data()[k]);
            for (std::size_t k = 0; k < checked.size(); ++k) {
                const auto [l, h] = checked[k];
                worst = std::max(worst, std::abs(importance(l, h) - by_differences[k]));
                std::printf("  layer %2lld head %lld: backward %.6f, central differences %.6f\n",
                            static_cast<long long>(l), static_cast<long long>(h), importance(l, h),
                            by_differences[k]);
            }
            if (!checked.empty())
                std::printf(
                    "backward against central differences (step %g, %lld forwards in %.1f s): "
                    "largest difference %.3g, %.4f of the largest importance\n",
                    o.step, static_cast<long long>(2 * checked.size()), seconds_since(differences),
                    worst, top > 0 ? worst / top : 0.0);
        } else {
            std::vector<std::pair<Index, Index>> all;
            for (Index l = 0; l < K; ++l)
                for (Index h = 0; h < H; ++h) all.emplace_back(l, h);
            const std::vector<double> by_differences =
                importance_by_differences(model, windows, all, o.step);
            std::copy(by_differences.begin(), by_differences.end(), importance.data());
            std::printf(
                "loss %.6f at xi = 1; %lld heads scored by central differences (%lld forwards) in "
                "%.1f s, %lld thread(s), load average %.1f before\n",
                base_loss, static_cast<long long>(K * H), static_cast<long long>(2 * K * H),
                seconds_since(scoring), static_cast<long long>(o.threads), scoring_load);
        }
        heads_report::print_importance(importance, "mean over windows of |d L_w / d xi_h|");
        if (!o.csv.empty() && !heads_report::write_importance_csv(o.csv, importance)) {
            std::fprintf(stderr, "llama_heads: cannot write %s\n", o.csv.c_str());
            return 1;
        }

        // Pruning: nothing (which must change nothing), then 10, 25, 50%.
        const double base = headwise::models::perplexity(model, evaluation, ppl).perplexity;
        std::printf("\nperplexity on the evaluation tokens, float32 weights: %.4f\n", base);
        {
            Model none = model;
            none.prune_heads({});
            const double same = headwise::models::perplexity(none, evaluation, ppl).perplexity;
            if (same == base)
                std::printf("pruning no head: perplexity %.4f, the unpruned model's bit for bit\n",
                            same);
            else
                std::printf("pruning no head: perplexity %.9g, the unpruned model's %.9g\n", same,
                            base);
        }
        std::printf("\npruned  heads  kv  order        perplexity  ratio   --prune-heads\n");
        const auto report = [&](int percent, const HeadsToPrune& heads, const std::string& order,
                                double value) {
            const auto [q, kv] = pruned_counts(heads, G);
            std::printf("%5d%%  %5lld  %2lld  %-11s  %10.4f  %6.4f  \"%s\"\n", percent,
                        static_cast<long long>(q), static_cast<long long>(kv), order.c_str(), value,
                        value / base, heads_report::prune_list(heads).c_str());
        };
        const std::vector<int> percents = {10, 25, 50};
        std::vector<HeadsToPrune> by_importance;
        std::vector<Model> pruned;  // by importance, kept for the quantized and speed runs
        for (const int percent : percents) {
            const Index count =
                static_cast<Index>(std::lround(percent / 100.0 * static_cast<double>(K * H)));
            std::mt19937_64 rng(static_cast<std::uint64_t>(o.seed));
            std::uniform_real_distribution<double> uniform(0.0, 1.0);
            for (Index d = -1; d < o.draws; ++d) {
                Tensor<double> score = importance;
                if (d >= 0)
                    for (Index k = 0; k < score.numel(); ++k) score.data()[k] = uniform(rng);
                const HeadsToPrune heads = choose_heads(score, count, Hkv);
                Model p = model;
                p.prune_heads(heads);
                report(percent, heads, d < 0 ? "importance" : "random " + std::to_string(d + 1),
                       headwise::models::perplexity(p, evaluation, ppl).perplexity);
                if (d < 0) {
                    by_importance.push_back(heads);
                    pruned.push_back(std::move(p));
                }
            }
        }

        // Q4_1: the unpruned and the pruned models quantized after pruning (the embedding table
        // stays float), beside the file's own blocks (GgufWeights::stored).
        const auto quantized = [](Model m) {
            m.with_weight_type(headwise::quant::Type::q4_1, headwise::FloatWeights::release);
            return m;
        };
        Model stored = Model::from_gguf(file, headwise::models::GgufWeights::stored);
        std::printf("\nQ4_1: the file's blocks (GgufWeights::stored), unpruned: perplexity %.4f\n",
                    headwise::models::perplexity(stored, evaluation, ppl).perplexity);
        std::vector<Model> q4;
        q4.push_back(quantized(model));
        for (const Model& p : pruned) q4.push_back(quantized(p));
        const double q4_base = headwise::models::perplexity(q4[0], evaluation, ppl).perplexity;
        std::printf("Q4_1 after pruning (float32 pruned, then with_weight_type(Q4_1)):\n");
        std::printf("pruned  heads  perplexity  ratio\n");
        std::printf("%5d%%  %5d  %10.4f  %6.4f\n", 0, 0, q4_base, 1.0);
        for (std::size_t i = 0; i < pruned.size(); ++i) {
            const double v = headwise::models::perplexity(q4[i + 1], evaluation, ppl).perplexity;
            std::printf("%5d%%  %5lld  %10.4f  %6.4f\n", percents[i],
                        static_cast<long long>(pruned_counts(by_importance[i], G).first), v,
                        v / q4_base);
        }

        // Speed: each round runs every model once, in turn, so that a change in the load hits
        // them all; the medians over the rounds.
        if (o.speed_rounds > 0 && o.prefill_tokens > 0 && o.decode_tokens > 0) {
            std::vector<Model*> all = {&model};
            for (Model& p : pruned) all.push_back(&p);
            for (Model& q : q4) all.push_back(&q);
            const std::vector<std::int64_t> text(tokens.begin() + W * C, tokens.end());
            std::vector<std::vector<double>> prefill(all.size()), decode(all.size());
            const double load_before = load_average();
            for (Index r = -1; r < o.speed_rounds; ++r)  // round -1 warms up, not counted
                for (std::size_t m = 0; m < all.size(); ++m) {
                    const auto [p, d] = speed(*all[m], text, o.prefill_tokens, o.decode_tokens);
                    if (r < 0) continue;
                    prefill[m].push_back(p);
                    decode[m].push_back(d);
                }
            std::printf(
                "\nspeed: prefill %lld tokens, then decode %lld one at a time; median of %lld "
                "rounds after a warm-up, %lld thread(s); load average %.1f before, %.1f after "
                "(shared machine: "
                "rough figures)\n",
                static_cast<long long>(o.prefill_tokens), static_cast<long long>(o.decode_tokens),
                static_cast<long long>(o.speed_rounds), static_cast<long long>(o.threads),
                load_before, load_average());
            std::printf("weights  pruned  heads  prefill tok/s  speedup  decode tok/s  speedup\n");
            const std::size_t per = 1 + pruned.size();
            for (std::size_t m = 0; m < all.size(); ++m) {
                const std::size_t i = m % per, first = m - i;
                const double p = median(prefill[m]), d = median(decode[m]);
                std::printf("%-7s  %5d%%  %5lld  %13.1f  %7.3f  %12.1f  %7.3f\n",
                            m < per ? "float32" : "Q4_1", i == 0 ? 0 : percents[i - 1],
                            static_cast<long long>(
                                i == 0 ? 0 : pruned_counts(by_importance[i - 1], G).first),
                            p, p / median(prefill[first]), d, d / median(decode[first]));
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_heads: %s\n", e.what());
        return 1;
    }
    return 0;
}
