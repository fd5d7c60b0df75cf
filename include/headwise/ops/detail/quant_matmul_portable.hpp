// SPDX-License-Identifier: MIT
// quant_matmul's portable kernels: each weight block unpacked to 8-bit integers and scales, an
// integer dot product with the rounded activation block, in plain C++.
#pragma once

#include <cstdint>  // std::uint8_t, std::int8_t, std::uint16_t, std::uint32_t
#include <cstring>  // std::memcpy

#include "../../config.hpp"
#include "../../quant/detail/numpy_float.hpp"
#include "../../quant/half.hpp"
#include "../../quant/k_quants.hpp"
#include "../../quant/types.hpp"

namespace headwise::detail {

/// The activations as quant_matmul's kernels read them. Rounded (block formats): row r's values
/// q[r in, (r + 1) in), and block b's scale and d-times-sum ds[2 (r nb + b)], ds[2 (r nb + b) + 1],
/// nb = in / 32. Float formats read x (row stride x_stride) instead.
struct QuantActivations {
    const std::int8_t* q = nullptr;
    const float* ds = nullptr;
    const float* x = nullptr;
    Index x_stride = 0;
    Index in = 0;
};

/// `count` consecutive weight rows of `type`, `stride` bytes apart, from `data`.
struct QuantRows {
    quant::Type type;
    const std::uint8_t* data;
    Index stride;
    Index count;
};

/// One weight block of 32 values as the integer kernels use it: value l is
/// dw sc[l / 16] q[l] + mw, and a block of activations x ~ xd xq meets it as
/// dw xd (sc[0] sum_{l<16} q xq + sc[1] sum_{l>=16} q xq) + mw xs  (xs = xd sum xq).
struct WeightBlock32 {
    std::int8_t q[32];
    int sc[2];
    float dw;
    float mw;
};

/// Block `blk` (of 32 values) of a row of `type` at `row`, unpacked.
inline void unpack_block32(quant::Type type, const std::uint8_t* row, Index blk,
                           WeightBlock32& out) noexcept {
    using quant::Type;
    out.sc[0] = out.sc[1] = 1;
    out.mw = 0.0f;
    switch (type) {
        case Type::q8_0: {
            const std::uint8_t* p = row + blk * 34;
            out.dw = quant::half_to_float(quant::detail::load_u16(p));
            std::memcpy(out.q, p + 2, 32);
            return;
        }
        case Type::q4_0:
        case Type::q4_1: {
            const bool affine = type == Type::q4_1;
            const std::uint8_t* p = row + blk * (affine ? 20 : 18);
            out.dw = quant::half_to_float(quant::detail::load_u16(p));
            if (affine) out.mw = quant::half_to_float(quant::detail::load_u16(p + 2));
            const std::uint8_t* qs = p + (affine ? 4 : 2);
            const int offset = affine ? 0 : 8;
            for (int l = 0; l < 16; ++l) {
                out.q[l] = static_cast<std::int8_t>((qs[l] & 0x0F) - offset);
                out.q[l + 16] = static_cast<std::int8_t>((qs[l] >> 4) - offset);
            }
            return;
        }
        case Type::q5_0:
        case Type::q5_1: {
            const bool affine = type == Type::q5_1;
            const std::uint8_t* p = row + blk * (affine ? 24 : 22);
            out.dw = quant::half_to_float(quant::detail::load_u16(p));
            if (affine) out.mw = quant::half_to_float(quant::detail::load_u16(p + 2));
            const std::uint8_t* h = p + (affine ? 4 : 2);
            const std::uint32_t qh =
                static_cast<std::uint32_t>(h[0]) | (static_cast<std::uint32_t>(h[1]) << 8) |
                (static_cast<std::uint32_t>(h[2]) << 16) | (static_cast<std::uint32_t>(h[3]) << 24);
            const std::uint8_t* qs = h + 4;
            const int offset = affine ? 0 : 16;
            for (int l = 0; l < 16; ++l) {
                const int q0 = (qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1u) << 4);
                const int q1 = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
                out.q[l] = static_cast<std::int8_t>(q0 - offset);
                out.q[l + 16] = static_cast<std::int8_t>(q1 - offset);
            }
            return;
        }
        case Type::q4_k: {
            const std::uint8_t* p = row + (blk / 8) * 144;
            const int j = static_cast<int>(blk % 8);
            int sc, m;
            quant::q4_k_scale_min(p + 4, j, sc, m);
            // The products as dequantization rounds them: d sc and dmin m, each to float.
            out.dw = quant::half_to_float(quant::detail::load_u16(p)) * static_cast<float>(sc);
            out.mw =
                -(quant::half_to_float(quant::detail::load_u16(p + 2)) * static_cast<float>(m));
            const std::uint8_t* q = p + 16 + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l)
                out.q[l] = static_cast<std::int8_t>((q[l] >> shift) & 0x0F);
            return;
        }
        case Type::q6_k: {
            const std::uint8_t* p = row + (blk / 8) * 210;
            const int j = static_cast<int>(blk % 8);  // values [32 j, 32 j + 32) of the block
            const auto* scales = reinterpret_cast<const std::int8_t*>(p + 192);
            out.dw = quant::half_to_float(quant::detail::load_u16(p + 208));
            out.sc[0] = scales[2 * j];
            out.sc[1] = scales[2 * j + 1];
            const int h = j / 4, r0 = 32 * (j % 4);
            for (int l = 0; l < 32; ++l) {
                const int r = r0 + l;
                const int low = (p[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
                const int high = (p[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
                out.q[l] = static_cast<std::int8_t>((low | (high << 4)) - 32);
            }
            return;
        }
        case Type::f32:
        case Type::f16:
        case Type::bf16:
            return;  // not block formats: quant_rows_portable reads them as floats
    }
}

/// Value i of a row of a float type.
inline float float_type_value(quant::Type type, const std::uint8_t* row, Index i) noexcept {
    if (type == quant::Type::f32) {
        float v;
        std::memcpy(&v, row + 4 * i, sizeof v);
        return v;
    }
    const std::uint16_t h = quant::detail::load_u16(row + 2 * i);
    if (type == quant::Type::f16) return quant::half_to_float(h);
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;  // bf16: the float's top half
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

/// y[n y_stride + o] = row o of W . activation row n (+ bias[o]) for the rows' count outputs and
/// N activation rows.
inline void quant_rows_portable(const QuantRows& W, const QuantActivations& act, Index N, float* y,
                                Index y_stride, const float* bias) noexcept {
    const Index in = act.in, nb = in / 32;
    const bool float_type =
        W.type == quant::Type::f32 || W.type == quant::Type::f16 || W.type == quant::Type::bf16;
    WeightBlock32 wb;
    for (Index o = 0; o < W.count; ++o) {
        const std::uint8_t* row = W.data + o * W.stride;
        for (Index n = 0; n < N; ++n) {
            float acc = 0.0f, acc_min = 0.0f;
            if (float_type) {
                const float* x = act.x + n * act.x_stride;
                for (Index i = 0; i < in; ++i) acc += float_type_value(W.type, row, i) * x[i];
            } else {
                const std::int8_t* xq = act.q + n * in;
                const float* ds = act.ds + 2 * n * nb;
                for (Index blk = 0; blk < nb; ++blk) {
                    unpack_block32(W.type, row, blk, wb);
                    const std::int8_t* xb = xq + blk * 32;
                    int dot0 = 0, dot1 = 0;
                    for (int l = 0; l < 16; ++l) dot0 += wb.q[l] * xb[l];
                    for (int l = 16; l < 32; ++l) dot1 += wb.q[l] * xb[l];
                    const int dot = wb.sc[0] * dot0 + wb.sc[1] * dot1;
                    acc += (wb.dw * ds[2 * blk]) * static_cast<float>(dot);
                    acc_min += wb.mw * ds[2 * blk + 1];
                }
            }
            y[n * y_stride + o] = acc + acc_min + (bias ? bias[o] : 0.0f);
        }
    }
}

}  // namespace headwise::detail
