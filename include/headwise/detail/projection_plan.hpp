// SPDX-License-Identifier: MIT
// The GEMMs each Projection performs for Q, K, V, and where each head's block lands.
#pragma once

#include <array>    // std::array
#include <cstddef>  // std::size_t
#include <vector>   // std::vector

#include "../config.hpp"
#include "../layers/attention_options.hpp"

namespace headwise::detail {

enum Input : int { kQuery = 0, kKey = 1, kValue = 2 };

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
/// with W a contiguous block of the packed weight buffer (Wq [E, E] | Wk [E, kdim] | Wv [E, vdim])
/// and b the matching slice of in_proj_bias [3E].
struct ProjectionGemm {
    int input = kQuery;  // which argument is X
    Index in = 0;        // columns of X and of W
    Index w_offset = 0;  // element offset of W in the packed weight buffer
    Index w_rows = 0;
    Index b_offset = 0;  // element offset of b in in_proj_bias
    int buffer = 0;      // output buffer
    Index y_offset = 0;  // element offset of Y(0, 0) in the buffer
    Index y_stride = 0;  // row stride of Y
    std::array<Segment, 3> segments{};
    int segment_count = 1;
};

/// The whole in-projection of one forward call.
struct ProjectionPlan {
    std::vector<ProjectionGemm> gemms;
    std::vector<std::array<Index, 2>> buffers;  // [rows, cols] of each output buffer
    std::array<HeadLayout, 3> heads{};          // layouts of Q, K, V
};

/// Geometry of one call: batch, lengths, feature sizes.
struct AttentionGeometry {
    Index B = 0, L = 0, S = 0, E = 0, H = 0, D = 0, kdim = 0, vdim = 0;
};

/// Builds the GEMM list for `projection`. `self` means query, key and value are one tensor;
/// `kv_same` means key and value are one tensor.
inline ProjectionPlan make_projection_plan(Projection projection, const AttentionGeometry& g,
                                           bool self, bool kv_same) {
    const Index E = g.E, D = g.D, H = g.H, NL = g.B * g.L, NS = g.B * g.S;
    const Index in_of[3] = {E, g.kdim, g.vdim};
    const Index w_offset_of[3] = {0, E * E, E * E + E * g.kdim};
    const Index rows_of[3] = {g.L, g.S, g.S};
    ProjectionPlan plan;

    // A [N, cols] buffer whose head h occupies columns [col0 + h D, col0 + (h + 1) D).
    auto interleaved = [&](int buffer, Index col0, Index cols, int input) {
        HeadLayout l;
        l.buffer = buffer;
        l.offset = col0;
        l.batch_stride = rows_of[input] * cols;
        l.head_stride = D;
        l.row_stride = cols;
        l.rows = rows_of[input];
        return l;
    };
    auto one_gemm = [&](int input, int buffer, Index y_offset, Index y_stride, Index w_row0,
                        Index w_rows) {
        ProjectionGemm gm;
        gm.input = input;
        gm.in = in_of[input];
        gm.w_offset = w_offset_of[input] + w_row0 * in_of[input];
        gm.w_rows = w_rows;
        gm.b_offset = input * E + w_row0;
        gm.buffer = buffer;
        gm.y_offset = y_offset;
        gm.y_stride = y_stride;
        gm.segments[0] = Segment{input, 0, w_rows};
        gm.segment_count = 1;
        return gm;
    };

    if (projection == Projection::fused && self) {
        // QKV[B L, 3E] = X W_in^T + b_in: the packed [3E, E] matrix in one GEMM.
        plan.buffers = {{NL, 3 * E}};
        ProjectionGemm gm = one_gemm(kQuery, 0, 0, 3 * E, 0, 3 * E);
        gm.segments = {Segment{kQuery, 0, E}, Segment{kKey, E, E}, Segment{kValue, 2 * E, E}};
        gm.segment_count = 3;
        plan.gemms = {gm};
        for (int i = 0; i < 3; ++i)
            plan.heads[static_cast<std::size_t>(i)] = interleaved(0, i * E, 3 * E, i);
    } else if (projection == Projection::fused && kv_same) {
        // Q[B L, E] = Xq Wq^T + bq, then KV[B S, 2E] = Xkv [Wk; Wv]^T + [bk; bv] in one GEMM.
        plan.buffers = {{NL, E}, {NS, 2 * E}};
        ProjectionGemm kv = one_gemm(kKey, 1, 0, 2 * E, 0, 2 * E);
        kv.segments = {Segment{kKey, 0, E}, Segment{kValue, E, E}, Segment{}};
        kv.segment_count = 2;
        plan.gemms = {one_gemm(kQuery, 0, 0, E, 0, E), kv};
        plan.heads[kQuery] = interleaved(0, 0, E, kQuery);
        plan.heads[kKey] = interleaved(1, 0, 2 * E, kKey);
        plan.heads[kValue] = interleaved(1, E, 2 * E, kValue);
    } else if (projection != Projection::per_head) {
        // Three GEMMs, one per projection (also fused with three distinct inputs).
        plan.buffers = {{NL, E}, {NS, E}, {NS, E}};
        for (int i = 0; i < 3; ++i) {
            plan.gemms.push_back(one_gemm(i, i, 0, E, 0, E));
            plan.heads[static_cast<std::size_t>(i)] = interleaved(i, 0, E, i);
        }
    } else {
        // 3H GEMMs: head h of input i is X_i W_{i,h}^T + b_{i,h}, into its own contiguous
        // [B N_i, D] block of a head-major [H, B N_i, D] buffer.
        plan.buffers = {{H * NL, D}, {H * NS, D}, {H * NS, D}};
        const Index n_of[3] = {NL, NS, NS};
        for (int i = 0; i < 3; ++i) {
            for (Index h = 0; h < H; ++h)
                plan.gemms.push_back(one_gemm(i, i, h * n_of[i] * D, D, h * D, D));
            HeadLayout l;
            l.buffer = i;
            l.offset = 0;
            l.batch_stride = rows_of[i] * D;
            l.head_stride = n_of[i] * D;
            l.row_stride = D;
            l.rows = rows_of[i];
            plan.heads[static_cast<std::size_t>(i)] = l;
        }
    }
    return plan;
}

}  // namespace headwise::detail
