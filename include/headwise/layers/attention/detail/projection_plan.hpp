// SPDX-License-Identifier: MIT
// The GEMMs each Projection performs for Q, K, V, and where each head's block lands.
#pragma once

#include <array>    // std::array
#include <cstddef>  // std::size_t
#include <vector>   // std::vector

#include "../../../config.hpp"
#include "../options.hpp"
#include "in_proj_layout.hpp"

namespace headwise::detail {

/// Where the [rows, D] block of (batch b, head h) lives inside a projection buffer:
/// element (i, d) is at buffer[offset + b * batch_stride + h * head_stride + i * row_stride + d].
struct HeadLayout {
    int buffer = 0;
    Index offset = 0;
    Index batch_stride = 0;
    Index head_stride = 0;
    Index row_stride = 0;
    Index rows = 0;  // L for queries, S for keys and values
};

/// A run of weight rows inside one GEMM that belongs to one input: the backward pass splits
/// dX along these so each argument gets its own gradient.
struct Segment {
    int input = kQuery;
    Index row0 = 0;  // first weight row (and output column) of the segment, relative to the GEMM
    Index rows = 0;
};

/// One GEMM of the in-projection:
///   Y[N, w_rows] = X[N, in] W[w_rows, in]^T + b[w_rows]
/// with W a contiguous row block of the packed weight buffer and b the matching slice of the packed
/// bias buffer (both as InProjLayout describes them).
struct ProjectionGemm {
    int input = kQuery;  // which argument is X
    Index in = 0;        // columns of X and of W
    Index w_offset = 0;  // element offset of W in the packed weight buffer
    Index w_rows = 0;
    Index b_offset = 0;                 // element offset of b in in_proj_bias
    int buffer = 0;                     // output buffer
    Index y_offset = 0;                 // element offset of Y(0, 0) in the buffer
    Index y_stride = 0;                 // row stride of Y
    std::array<Segment, 3> segments{};  // the unused ones have no rows
};

/// Geometry of one call: batch, query length, key length before and after appending bias_k /
/// zero-attention keys.
struct AttentionGeometry {
    Index B = 0, L = 0, S = 0;
    Index Sx = 0;  // Sx = S plus the appended keys (bias_k, the zero key)

    friend bool operator==(const AttentionGeometry& a, const AttentionGeometry& b) noexcept {
        return a.B == b.B && a.L == b.L && a.S == b.S && a.Sx == b.Sx;
    }
};

/// What a plan is built for; equal keys give equal plans.
struct ProjectionKey {
    Projection projection = Projection::fused;
    InProjLayout layout;
    AttentionGeometry g;
    bool self = false;     // query, key and value are one tensor
    bool kv_same = false;  // key and value are one tensor

    friend bool operator==(const ProjectionKey& a, const ProjectionKey& b) noexcept {
        return a.projection == b.projection && a.layout == b.layout && a.g == b.g &&
               a.self == b.self && a.kv_same == b.kv_same;
    }
};

/// The whole in-projection of one forward call.
struct ProjectionPlan {
    ProjectionKey key;
    std::vector<ProjectionGemm> gemms;
    std::vector<std::array<Index, 2>> buffers;  // [rows, cols] of each output buffer
    HeadLayout heads[3] = {};                   // layouts of Q, K, V
};

/// Builds the GEMM list for `key.projection` into `plan`, reusing its vectors' storage: the
/// number of GEMMs depends on the projection only, so a decode step whose chunk length differs
/// from the previous one's rebuilds its plan without allocating.
inline void build_projection_plan(const ProjectionKey& key, ProjectionPlan& plan) {
    const InProjLayout& w = key.layout;
    const Index D = w.D, NL = key.g.B * key.g.L, NS = key.g.B * key.g.S;
    const Index n_of[3] = {NL, NS, NS};                   // rows of X_i
    const Index len_of[3] = {key.g.L, key.g.S, key.g.S};  // rows of one (batch, head) block
    const Index cols_of[3] = {w.rows(kQuery), w.rows(kKey), w.rows(kValue)};  // of Y_i
    plan.key = key;
    plan.gemms.clear();
    plan.buffers.clear();

    // A [N, cols] buffer whose head h occupies columns [col0 + h D, col0 + (h + 1) D).
    auto interleaved = [&](int buffer, Index col0, Index cols, int input) {
        HeadLayout l;
        l.buffer = buffer;
        l.offset = col0;
        l.batch_stride = len_of[input] * cols;
        l.head_stride = D;
        l.row_stride = cols;
        l.rows = len_of[input];
        return l;
    };
    auto one_gemm = [&](int input, int buffer, Index y_offset, Index y_stride, Index w_row0,
                        Index w_rows) {
        ProjectionGemm gm;
        gm.input = input;
        gm.in = w.in(input);
        gm.w_offset = w.weight_offset(input) + w_row0 * w.in(input);
        gm.w_rows = w_rows;
        gm.b_offset = w.bias_offset(input) + w_row0;
        gm.buffer = buffer;
        gm.y_offset = y_offset;
        gm.y_stride = y_stride;
        gm.segments[0] = Segment{input, 0, w_rows};
        return gm;
    };

    if (key.projection == Projection::fused && key.self) {
        // QKV[B L, 3E] = X W_in^T + b_in: the packed in-projection in one GEMM.
        const Index col0[3] = {0, cols_of[kQuery], cols_of[kQuery] + cols_of[kKey]};
        const Index qkv = col0[kValue] + cols_of[kValue];
        plan.buffers = {{NL, qkv}};
        ProjectionGemm gm = one_gemm(kQuery, 0, 0, qkv, 0, qkv);
        gm.segments = {Segment{kQuery, col0[kQuery], cols_of[kQuery]},
                       Segment{kKey, col0[kKey], cols_of[kKey]},
                       Segment{kValue, col0[kValue], cols_of[kValue]}};
        plan.gemms = {gm};
        for (int i = 0; i < 3; ++i) plan.heads[i] = interleaved(0, col0[i], qkv, i);
    } else if (key.projection == Projection::fused && key.kv_same) {
        // Q[B L, E] = Xq Wq^T + bq, then KV[B S, 2E] = Xkv [Wk; Wv]^T + [bk; bv] in one GEMM.
        const Index kv = cols_of[kKey] + cols_of[kValue];
        plan.buffers = {{NL, cols_of[kQuery]}, {NS, kv}};
        ProjectionGemm gm = one_gemm(kKey, 1, 0, kv, 0, kv);
        gm.segments = {Segment{kKey, 0, cols_of[kKey]},
                       Segment{kValue, cols_of[kKey], cols_of[kValue]}, Segment{}};
        plan.gemms = {one_gemm(kQuery, 0, 0, cols_of[kQuery], 0, cols_of[kQuery]), gm};
        plan.heads[kQuery] = interleaved(0, 0, cols_of[kQuery], kQuery);
        plan.heads[kKey] = interleaved(1, 0, kv, kKey);
        plan.heads[kValue] = interleaved(1, cols_of[kKey], kv, kValue);
    } else if (key.projection != Projection::per_head) {
        // Three GEMMs, one per projection (also fused with three distinct inputs).
        plan.buffers = {{NL, cols_of[kQuery]}, {NS, cols_of[kKey]}, {NS, cols_of[kValue]}};
        for (int i = 0; i < 3; ++i) {
            plan.gemms.push_back(one_gemm(i, i, 0, cols_of[i], 0, cols_of[i]));
            plan.heads[i] = interleaved(i, 0, cols_of[i], i);
        }
    } else {
        // One GEMM per head and input: head h of input i is X_i W_{i,h}^T + b_{i,h}, into its
        // own contiguous [B N_i, D] block of a head-major [heads(i), B N_i, D] buffer.
        for (int i = 0; i < 3; ++i) {
            plan.buffers.push_back({w.heads(i) * n_of[i], D});
            for (Index h = 0; h < w.heads(i); ++h)
                plan.gemms.push_back(one_gemm(i, i, h * n_of[i] * D, D, h * D, D));
            HeadLayout l;
            l.buffer = i;
            l.offset = 0;
            l.batch_stride = len_of[i] * D;
            l.head_stride = n_of[i] * D;
            l.row_stride = D;
            l.rows = len_of[i];
            plan.heads[i] = l;
        }
    }
}

}  // namespace headwise::detail
