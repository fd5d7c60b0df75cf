// SPDX-License-Identifier: MIT
// What the heads programs (heads.cpp, llama_heads.cpp) print and write alike: the importance
// table, its CSV (heatmap.py draws it) and a pruning as a --prune-heads list.
#pragma once

#include <headwise/headwise.hpp>

#include <algorithm>  // std::max
#include <cstdio>     // std::printf, std::fprintf, std::fopen, std::fclose
#include <string>     // std::string, std::to_string

namespace heads_report {

/// importance [N, H] as a table, layers down, heads across, relative to the largest value,
/// under a heading that names `what` (the expectation the importance is).
inline void print_importance(const headwise::Tensor<double>& importance, const char* what) {
    const headwise::Index N = importance.shape()[0], H = importance.shape()[1];
    double top = 0;
    for (headwise::Index k = 0; k < N * H; ++k) top = std::max(top, importance.data()[k]);
    std::printf(
        "\nimportance I_h = %s, relative to the largest (%.6g); layers down, heads across\nlayer",
        what, top);
    for (headwise::Index h = 0; h < H; ++h) std::printf(" %7lld", static_cast<long long>(h));
    std::printf("\n");
    for (headwise::Index l = 0; l < N; ++l) {
        std::printf("%5lld", static_cast<long long>(l));
        for (headwise::Index h = 0; h < H; ++h)
            std::printf(" %7.3f", top > 0 ? importance(l, h) / top : 0.0);
        std::printf("\n");
    }
}

/// importance [N, H] as "layer,head,importance" lines under that header; false when the file
/// cannot be written.
inline bool write_importance_csv(const std::string& path,
                                 const headwise::Tensor<double>& importance) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return false;
    const headwise::Index N = importance.shape()[0], H = importance.shape()[1];
    std::fprintf(f, "layer,head,importance\n");
    for (headwise::Index l = 0; l < N; ++l)
        for (headwise::Index h = 0; h < H; ++h)
            std::fprintf(f, "%lld,%lld,%.9g\n", static_cast<long long>(l),
                         static_cast<long long>(h), importance(l, h));
    return std::fclose(f) == 0;
}

/// {layer: [heads]} as the --prune-heads value of embed, "0:1,3;2:5" ("" for none).
inline std::string prune_list(const headwise::models::HeadsToPrune& heads) {
    std::string s;
    for (const auto& [layer, list] : heads) {
        if (list.empty()) continue;
        s += (s.empty() ? "" : ";") + std::to_string(layer) + ":";
        for (std::size_t i = 0; i < list.size(); ++i) s += (i ? "," : "") + std::to_string(list[i]);
    }
    return s;
}

}  // namespace heads_report
