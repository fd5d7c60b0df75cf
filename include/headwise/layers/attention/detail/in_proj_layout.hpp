// SPDX-License-Identifier: MIT
// InProjLayout: where Wq, Wk, Wv, each head's rows and the biases sit in the packed in-projection.
#pragma once

#include "../../../config.hpp"
#include "../../../shape.hpp"

namespace headwise::detail {

/// The three inputs of attention, in the order of the packed buffers.
enum Input : int { kQuery = 0, kKey = 1, kValue = 2 };

/// The one description of the packed in-projection parameters. The weights are one buffer
///   Wq [H D, E] | Wk [Hkv D, kdim] | Wv [Hkv D, vdim]        (PyTorch's (out, in) layout)
/// and the biases one buffer bq [H D] | bk [Hkv D] | bv [Hkv D], so that with
/// kdim == vdim == E and Hkv == H the weights are torch's in_proj_weight [3E, E]. Head h of input
/// i owns the contiguous [D, in(i)] row block at weight_offset(i, h) and the [D] bias slice at
/// bias_offset(i, h). Hkv (kv_heads) is the number of key/value heads; it equals H for
/// multi-head attention. The inner width H D (the concatenated heads, the columns of out_proj)
/// equals E unless options.head_dim sets D.
struct InProjLayout {
    Index E = 0;         // embed_dim: query features and output features
    Index H = 0;         // query heads
    Index D = 0;         // head dim: options.head_dim, or E / H
    Index kdim = 0;      // key features
    Index vdim = 0;      // value features
    Index kv_heads = 0;  // Hkv: key and value heads

    /// The inner width H D: features of Q and of the concatenated heads ctx, columns of
    /// out_proj.weight [E, H D].
    Index inner() const noexcept { return H * D; }
    /// Heads of input i: H for the query, Hkv for key and value.
    Index heads(int input) const noexcept { return input == kQuery ? H : kv_heads; }
    /// Output features of input i's projection (rows of its weight): heads(i) D.
    Index rows(int input) const noexcept { return heads(input) * D; }
    /// Input features of input i's projection (columns of its weight).
    Index in(int input) const noexcept {
        return input == kQuery ? E : (input == kKey ? kdim : vdim);
    }
    /// Element offset of input i's weight, or of head h's [D, in(i)] row block of it.
    Index weight_offset(int input, Index head = 0) const noexcept {
        Index offset = 0;
        for (int j = 0; j < input; ++j) offset += rows(j) * in(j);
        return offset + head * D * in(input);
    }
    /// Element offset of input i's bias, or of head h's [D] slice of it.
    Index bias_offset(int input, Index head = 0) const noexcept {
        Index offset = 0;
        for (int j = 0; j < input; ++j) offset += rows(j);
        return offset + head * D;
    }
    /// Shape of input i's weight: [rows(i), in(i)].
    Shape weight_shape(int input) const { return Shape{rows(input), in(input)}; }
    /// Elements of the packed weight and bias buffers.
    Index weight_size() const noexcept { return weight_offset(kValue) + rows(kValue) * vdim; }
    Index bias_size() const noexcept { return bias_offset(kValue) + rows(kValue); }
    /// True when the weights are one state-dict entry, in_proj_weight [H D + 2 Hkv D, E]: torch's
    /// [3E, E] when Hkv == H and H D == E.
    bool packed() const noexcept { return kdim == E && vdim == E; }
    /// Rows of the whole packed weight: H D + 2 Hkv D.
    Index packed_rows() const noexcept { return rows(kQuery) + rows(kKey) + rows(kValue); }
    /// Query heads per key/value head.
    Index group() const noexcept { return H / kv_heads; }
    /// The key/value head query head h reads (Ainslie et al. 2023: contiguous groups).
    Index kv_head(Index h) const noexcept { return h / group(); }

    friend bool operator==(const InProjLayout& a, const InProjLayout& b) noexcept {
        return a.E == b.E && a.H == b.H && a.D == b.D && a.kdim == b.kdim && a.vdim == b.vdim &&
               a.kv_heads == b.kv_heads;
    }
    friend bool operator!=(const InProjLayout& a, const InProjLayout& b) noexcept {
        return !(a == b);
    }
};

}  // namespace headwise::detail
