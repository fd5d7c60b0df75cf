// SPDX-License-Identifier: MIT
// heads: which attention heads of a sentence-transformers BERT (all-MiniLM-L6-v2) matter, and
// what pruning the others costs.
//
//   heads MODEL_DIR PAIRS_FILE [--pairs N] [--draws K] [--seed S] [--csv FILE]
//         [--importance gradient|differences] [--step H] [--check]
//
// PAIRS_FILE holds one pair of paraphrases a line, separated by a tab. The loss is the one the
// model was trained with (sentence-transformers' MultipleNegativesRankingLoss): for pair i,
//   loss_i = -log softmax_j(20 cos(a_i, b_j))[i]
// over the pairs' second sentences b_j (the others are in-batch negatives). A distance to the
// unpruned model's own embeddings would not do: at xi = 1 it is at its minimum (zero), so its
// gradient with respect to every gate is zero and ranks nothing.
// Importance (Michel et al. 2019): I_h = mean_i |d loss_i / d xi_h| at xi = 1, xi_h head h's gate
// (BertModel's head_mask), in double: by default from the gates' gradient BertModel::backward
// gives (one training forward, then one backward per pair, loss_i reading every pair's second
// sentence); with --importance differences by central differences of step H (default 1e-4; two
// forwards per head); --check computes both and prints the largest difference as a fraction of the
// largest importance. Printed as a table (layers down, heads across), written as CSV with
// --csv (heatmap.py draws it). Then 10, 25 and 50% of the heads are pruned, the least important
// first and in random orders (K draws, default 3, seeded), never the last head of a layer:
// printed with the mean and smallest cosine of every sentence's embedding to the unpruned one,
// and the --prune-heads list that `embed` takes to reproduce it.
#include <headwise/headwise.hpp>

#include <algorithm>  // std::sort, std::shuffle, std::min
#include <cmath>      // std::exp, std::log, std::abs, std::lround
#include <cstdint>    // std::uint64_t
#include <cstdio>     // std::printf, std::fprintf
#include <cstdlib>    // std::strtoll, std::strtod
#include <exception>  // std::exception
#include <fstream>    // std::ifstream
#include <map>        // std::map
#include <random>     // std::mt19937_64
#include <string>     // std::string, std::getline
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "heads_report.hpp"

namespace {

using headwise::Index;
using headwise::Tensor;
using Embedder = headwise::models::SentenceEmbedder<double>;

constexpr const char* kUsage =
    "usage: heads MODEL_DIR PAIRS_FILE [--pairs N] [--draws K] [--seed S] [--csv FILE]\n"
    "             [--importance gradient|differences] [--step H] [--check]\n";

// The pooled, normalised embeddings [B, E] of an encoded batch under the gates head_mask [N, H]
// (empty: none).
Tensor<double> embed(Embedder& embedder, const headwise::text::BertBatch& batch,
                     const Tensor<double>& head_mask) {
    headwise::models::HeadOptions<double> heads;
    if (head_mask.numel() > 0) heads.head_mask = head_mask;
    const Tensor<double> hidden =
        embedder.model().forward(batch.input_ids, batch.padding_mask, {}, heads).last_hidden_state;
    Tensor<double> pooled =
        headwise::models::pool<double>(hidden, batch.padding_mask, embedder.config().pooling);
    headwise::models::l2_normalize_rows<double>(pooled);
    return pooled;
}

// loss_i of each pair from the embeddings [2P, E]: rows 0..P-1 the first sentences, P..2P-1 the
// second ones. The scale 20 is MultipleNegativesRankingLoss's default.
std::vector<double> pair_losses(const Tensor<double>& e, Index P) {
    const Index E = e.shape()[1];
    std::vector<double> loss(static_cast<std::size_t>(P));
    for (Index i = 0; i < P; ++i) {
        std::vector<double> logits(static_cast<std::size_t>(P));
        double top = -1e300;
        for (Index j = 0; j < P; ++j) {
            double dot = 0;
            for (Index k = 0; k < E; ++k) dot += e.data()[i * E + k] * e.data()[(P + j) * E + k];
            logits[static_cast<std::size_t>(j)] = 20.0 * dot;
            top = std::max(top, 20.0 * dot);
        }
        double sum = 0;  // log-sum-exp, shifted by the largest logit so that exp cannot overflow
        for (double l : logits) sum += std::exp(l - top);
        loss[static_cast<std::size_t>(i)] =
            top + std::log(sum) - logits[static_cast<std::size_t>(i)];
    }
    return loss;
}

// d loss_i / d e [2P, E] for pair i's loss (pair_losses): with p_j the softmax over j of
// 20 a_i . b_j, d loss_i / d a_i = 20 sum_j (p_j - [j = i]) b_j and
// d loss_i / d b_j = 20 (p_j - [j = i]) a_i; the other rows are zero.
Tensor<double> pair_loss_gradient(const Tensor<double>& e, Index P, Index i) {
    const Index E = e.shape()[1];
    std::vector<double> p(static_cast<std::size_t>(P));
    double top = -1e300;
    for (Index j = 0; j < P; ++j) {
        double dot = 0;
        for (Index k = 0; k < E; ++k) dot += e.data()[i * E + k] * e.data()[(P + j) * E + k];
        p[static_cast<std::size_t>(j)] = 20.0 * dot;
        top = std::max(top, 20.0 * dot);
    }
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - top));
    Tensor<double> d(headwise::Shape{2 * P, E});
    for (Index j = 0; j < P; ++j) {
        const double c = 20.0 * (p[static_cast<std::size_t>(j)] / sum - (j == i ? 1.0 : 0.0));
        for (Index k = 0; k < E; ++k) {
            d.data()[i * E + k] += c * e.data()[(P + j) * E + k];
            d.data()[(P + j) * E + k] += c * e.data()[i * E + k];
        }
    }
    return d;
}

// I [N, H]: mean_i |d loss_i / d xi_h| at xi = 1, from the gates' gradient of BertModel::backward
// (the pooling and the normalisation walked back first): one training forward, one backward per
// pair. The model is left in evaluation mode with its gradients zeroed.
Tensor<double> importance_by_gradient(Embedder& embedder, const headwise::text::BertBatch& batch,
                                      Index P) {
    auto& model = embedder.model();
    const headwise::models::Pooling pooling = embedder.config().pooling;
    model.train();
    const auto f = model.forward_train(batch.input_ids, batch.padding_mask, {}, {},
                                       /*head_mask_grad=*/true);
    const Tensor<double> pooled =
        headwise::models::pool<double>(f.last_hidden_state, batch.padding_mask, pooling);
    Tensor<double> e = pooled;
    headwise::models::l2_normalize_rows<double>(e);
    const Index N = model.config().num_hidden_layers, H = model.config().num_attention_heads;
    Tensor<double> importance(headwise::Shape{N, H});
    for (Index i = 0; i < P; ++i) {
        const Tensor<double> d_pooled = headwise::models::l2_normalize_rows_backward<double>(
            pooled, pair_loss_gradient(e, P, i));
        const Tensor<double> d_hidden = headwise::models::pool_backward<double>(
            f.last_hidden_state, batch.padding_mask, pooling, d_pooled);
        const Tensor<double> gates = model.backward(f, d_hidden).head_mask;  // [N, H]
        for (Index k = 0; k < N * H; ++k)
            importance.data()[k] += std::abs(gates.data()[k]) / static_cast<double>(P);
    }
    model.zero_grad();
    model.eval();
    return importance;
}

// I [N, H] by central differences of step `step` in each gate: two forwards per head.
Tensor<double> importance_by_differences(Embedder& embedder, const headwise::text::BertBatch& batch,
                                         Index P, double step) {
    const Index N = embedder.model().config().num_hidden_layers;
    const Index H = embedder.model().config().num_attention_heads;
    Tensor<double> importance(headwise::Shape{N, H});
    for (Index l = 0; l < N; ++l)
        for (Index h = 0; h < H; ++h) {
            Tensor<double> gates(headwise::Shape{N, H});
            for (Index k = 0; k < N * H; ++k) gates.data()[k] = 1.0;
            gates(l, h) = 1.0 + step;
            const std::vector<double> up = pair_losses(embed(embedder, batch, gates), P);
            gates(l, h) = 1.0 - step;
            const std::vector<double> down = pair_losses(embed(embedder, batch, gates), P);
            double sum = 0;
            for (Index i = 0; i < P; ++i)
                sum +=
                    std::abs(up[static_cast<std::size_t>(i)] - down[static_cast<std::size_t>(i)]) /
                    (2 * step);
            importance(l, h) = sum / static_cast<double>(P);
        }
    return importance;
}

// Cosine of each row of a to the same row of b (both normalised): mean and smallest.
std::pair<double, double> cosines(const Tensor<double>& a, const Tensor<double>& b) {
    const Index N = a.shape()[0], E = a.shape()[1];
    double mean = 0, least = 1;
    for (Index n = 0; n < N; ++n) {
        double dot = 0;
        for (Index k = 0; k < E; ++k) dot += a.data()[n * E + k] * b.data()[n * E + k];
        mean += dot / static_cast<double>(N);
        least = std::min(least, dot);
    }
    return {mean, least};
}

// The first `count` heads of `order` (pairs layer, head), skipping any that would leave its
// layer without heads.
headwise::models::HeadsToPrune choose(const std::vector<std::pair<Index, Index>>& order,
                                      Index count, Index heads_per_layer) {
    headwise::models::HeadsToPrune chosen;
    Index taken = 0;
    for (const auto& [layer, head] : order) {
        if (taken == count) break;
        std::vector<Index>& list = chosen[layer];
        if (static_cast<Index>(list.size()) + 1 == heads_per_layer) continue;
        list.push_back(head);
        ++taken;
    }
    for (auto& [layer, list] : chosen) std::sort(list.begin(), list.end());
    return chosen;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fputs(kUsage, stderr);
        return 2;
    }
    const std::string dir = argv[1], pairs_file = argv[2];
    long long max_pairs = 0, draws = 3;
    std::uint64_t seed = 1;
    double step = 1e-4;
    std::string csv;
    bool gradient = true;  // --importance gradient (else differences)
    bool check = false;    // --check: both, and their largest difference
    for (int i = 3; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        char* end = nullptr;
        if (arg == "--pairs" && has_value) {
            max_pairs = std::strtoll(argv[++i], &end, 10);
        } else if (arg == "--draws" && has_value) {
            draws = std::strtoll(argv[++i], &end, 10);
        } else if (arg == "--seed" && has_value) {
            seed = static_cast<std::uint64_t>(std::strtoll(argv[++i], &end, 10));
        } else if (arg == "--step" && has_value) {
            step = std::strtod(argv[++i], &end);
        } else if (arg == "--csv" && has_value) {
            csv = argv[++i];
            continue;
        } else if (arg == "--check") {
            check = true;
            continue;
        } else if (arg == "--importance" && has_value) {
            const std::string value = argv[++i];
            if (value != "gradient" && value != "differences") {
                std::fprintf(stderr,
                             "heads: --importance needs gradient or differences, got %s\n%s",
                             value.c_str(), kUsage);
                return 2;
            }
            gradient = value == "gradient";
            continue;
        } else {
            std::fprintf(stderr, "heads: unknown option or missing value: %s\n%s", arg.c_str(),
                         kUsage);
            return 2;
        }
        if (end == nullptr || *end != '\0' || max_pairs < 0 || draws < 0 || !(step > 0)) {
            std::fprintf(stderr, "heads: %s needs a non-negative number, got %s\n%s", arg.c_str(),
                         argv[i], kUsage);
            return 2;
        }
    }

    try {
        // The pairs: first sentences, then second ones.
        std::ifstream in(pairs_file);
        if (!in) {
            std::fprintf(stderr, "heads: cannot read %s\n", pairs_file.c_str());
            return 1;
        }
        std::vector<std::string> first, second;
        for (std::string line; std::getline(in, line);) {
            const std::size_t tab = line.find('\t');
            if (tab == std::string::npos) continue;
            first.push_back(line.substr(0, tab));
            second.push_back(line.substr(tab + 1));
            if (max_pairs > 0 && static_cast<long long>(first.size()) == max_pairs) break;
        }
        const Index P = static_cast<Index>(first.size());
        if (P < 2) {
            std::fprintf(stderr, "heads: %s: needs at least 2 tab-separated pairs, got %lld\n",
                         pairs_file.c_str(), static_cast<long long>(P));
            return 1;
        }
        std::vector<std::string> texts = first;
        texts.insert(texts.end(), second.begin(), second.end());

        Embedder embedder = Embedder::from_directory(dir);
        const headwise::text::BertBatch batch = embedder.tokenizer().encode_batch(texts);
        const Index N = embedder.model().config().num_hidden_layers;
        const Index H = embedder.model().config().num_attention_heads;
        const Tensor<double> reference = embed(embedder, batch, {});  // [2P, E]
        double mean_loss = 0;
        for (double l : pair_losses(reference, P)) mean_loss += l / static_cast<double>(P);
        std::printf("%lld pairs (%lld sentences), loss %.6f at xi = 1\n", static_cast<long long>(P),
                    static_cast<long long>(2 * P), mean_loss);

        // I_h = mean_i |d loss_i / d xi_h|.
        const Tensor<double> importance = gradient
                                              ? importance_by_gradient(embedder, batch, P)
                                              : importance_by_differences(embedder, batch, P, step);
        if (check) {
            const Tensor<double> other = gradient
                                             ? importance_by_differences(embedder, batch, P, step)
                                             : importance_by_gradient(embedder, batch, P);
            double top = 0, worst = 0;
            for (Index k = 0; k < N * H; ++k) {
                top = std::max(top, importance.data()[k]);
                worst = std::max(worst, std::abs(importance.data()[k] - other.data()[k]));
            }
            std::printf(
                "gradient against central differences: largest difference %.3g of the "
                "largest importance\n",
                worst / top);
        }
        heads_report::print_importance(importance, "mean over pairs of |d loss / d xi_h|");
        if (!csv.empty() && !heads_report::write_importance_csv(csv, importance)) {
            std::fprintf(stderr, "heads: cannot write %s\n", csv.c_str());
            return 1;
        }

        // Pruning: by importance (least first) and in random orders.
        std::vector<std::pair<Index, Index>> by_importance;
        for (Index l = 0; l < N; ++l)
            for (Index h = 0; h < H; ++h) by_importance.emplace_back(l, h);
        std::stable_sort(by_importance.begin(), by_importance.end(),
                         [&](const auto& a, const auto& b) {
                             return importance(a.first, a.second) < importance(b.first, b.second);
                         });
        std::printf("\npruned  heads  order        mean cos  min cos   --prune-heads\n");
        for (const int percent : {10, 25, 50}) {
            const Index count =
                static_cast<Index>(std::lround(percent / 100.0 * static_cast<double>(N * H)));
            std::mt19937_64 rng(seed);
            for (long long d = -1; d < draws; ++d) {
                std::vector<std::pair<Index, Index>> order = by_importance;
                if (d >= 0) std::shuffle(order.begin(), order.end(), rng);
                const headwise::models::HeadsToPrune heads = choose(order, count, H);
                Embedder pruned = embedder;
                pruned.model().prune_heads(heads);
                const auto [mean, least] = cosines(embed(pruned, batch, {}), reference);
                const std::string name = d < 0 ? "importance" : "random " + std::to_string(d + 1);
                std::printf("%5d%%  %5lld  %-11s  %.6f  %.6f  \"%s\"\n", percent,
                            static_cast<long long>(count), name.c_str(), mean, least,
                            heads_report::prune_list(heads).c_str());
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "heads: %s\n", e.what());
        return 1;
    }
    return 0;
}
