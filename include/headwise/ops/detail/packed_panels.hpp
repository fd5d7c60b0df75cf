// SPDX-License-Identifier: MIT
// A matrix product against an operand packed once into column panels, for the blocked attention
// kernels: C = alpha A B (+ C), B read from panels of kPanelWidth columns, AVX2 + FMA at run time.
#pragma once

#include <algorithm>  // std::min, std::max

#include "../../config.hpp"
#include "cpu_features.hpp"

#if HEADWISE_X86_DISPATCH
#include <immintrin.h>  // AVX2 and FMA intrinsics (usable under a target attribute)
#endif

// Why: the blocked kernels multiply every block of queries by the same key and value blocks. A
// BLAS's GEMM copies ("packs") both operands into its kernel's layout on every call, so at
// L = 4096 each K and V block was packed again for each of the 32 query blocks: a third of the
// call. Here B is packed once (per call, or per key block in backward) into panels of
// kPanelWidth<T> columns, each panel k rows of contiguous kPanelWidth-wide rows (the layout a
// register tile reads with two vector loads per k), and the product reads A in place: A's entries
// are broadcast one at a time, so a strided A or a transposed A (dS^T, P^T) costs nothing to read.
// The register tile is kPanelRows x kPanelWidth: 6 x 16 floats or 6 x 8 doubles, twelve AVX2
// accumulators (BLIS's Haswell shape). Without AVX2 (other CPUs, other compilers) the portable
// tile below computes the same sums in the same order of k, so results do not depend on the path
// beyond the rounding of a fused multiply-add.

namespace headwise::detail {

/// Columns per packed panel: two AVX2 registers of T.
template <class T>
inline constexpr Index kPanelWidth = 32 / static_cast<Index>(sizeof(T)) * 2;
/// Rows of C per register tile.
inline constexpr Index kPanelRows = 6;

/// Elements a packing of a [k, n] matrix takes: n rounded up to whole panels, times k.
template <class T>
constexpr Index packed_size(Index k, Index n) {
    return (n + kPanelWidth<T> - 1) / kPanelWidth<T> * kPanelWidth<T> * k;
}

/// A [k, n] matrix packed into panels: column j, row p at data[(j / W) * panel_stride + p W + j %
/// W] with W = kPanelWidth<T>; the columns of the last panel past n are 0.
template <class T>
struct PackedPanels {
    const T* data = nullptr;
    Index panel_stride = 0;  // elements from one panel to the next (k W for a whole packing)

    /// The same panels from row p0 on (rows p0 .. of every panel).
    PackedPanels from_row(Index p0) const { return {data + p0 * kPanelWidth<T>, panel_stride}; }
};

/// Packs B [k, n], B(p, j) = b[p * rs + j * cs], into dst (packed_size<T>(k, n) elements).
template <class T>
PackedPanels<T> pack_panels(const T* b, Index rs, Index cs, Index k, Index n, T* dst) {
    constexpr Index W = kPanelWidth<T>;
    const Index panels = (n + W - 1) / W;
    for (Index q = 0; q < panels; ++q) {
        T* panel = dst + q * k * W;
        const Index j0 = q * W, w = std::min(W, n - j0);
        if (cs == 1) {  // B's rows are contiguous (V, Q, dO): copy W-wide row pieces
            for (Index p = 0; p < k; ++p) {
                const T* src = b + p * rs + j0;
                T* out = panel + p * W;
                for (Index jj = 0; jj < w; ++jj) out[jj] = src[jj];
                for (Index jj = w; jj < W; ++jj) out[jj] = T(0);
            }
        } else {  // B = X^T with X's rows contiguous (K^T, V^T): walk X's rows
            for (Index jj = 0; jj < w; ++jj) {
                const T* src = b + (j0 + jj) * cs;
                for (Index p = 0; p < k; ++p) panel[p * W + jj] = src[p * rs];
            }
            for (Index p = 0; p < k; ++p)
                for (Index jj = w; jj < W; ++jj) panel[p * W + jj] = T(0);
        }
    }
    return {dst, k * W};
}

/// One register tile, portable: tile[ii, jj] = sum_p a[ii][p * csa] bp[p W + jj] for
/// ii < kPanelRows, jj < W (the rows of `a` past the valid ones point at a valid row).
template <class T>
void panel_tile_portable(Index k, const T* const* a, Index csa, const T* bp, T* tile) {
    constexpr Index W = kPanelWidth<T>;
    T acc[kPanelRows][W] = {};
    for (Index p = 0; p < k; ++p) {
        const T* b = bp + p * W;
        for (Index ii = 0; ii < kPanelRows; ++ii) {
            const T x = a[ii][p * csa];
            for (Index jj = 0; jj < W; ++jj) acc[ii][jj] += x * b[jj];
        }
    }
    for (Index ii = 0; ii < kPanelRows; ++ii)
        for (Index jj = 0; jj < W; ++jj) tile[ii * W + jj] = acc[ii][jj];
}

#if HEADWISE_X86_DISPATCH
/// The register tile in AVX2 + FMA, float: 6 rows x 16 columns in twelve registers. Not inlined:
/// inlined into packed_gemm, GCC 12 kept the caller's loop invariants in vector registers and
/// spilled a B vector to the stack inside the k loop (the forward slice at L = 4096 ran 1.5x
/// slower).
HEADWISE_TARGET_AVX2 __attribute__((noinline)) inline void panel_tile_avx2(
    Index k, const float* const* a, Index csa, const float* bp, float* tile) {
    __m256 c0a = _mm256_setzero_ps(), c0b = _mm256_setzero_ps(), c1a = _mm256_setzero_ps(),
           c1b = _mm256_setzero_ps(), c2a = _mm256_setzero_ps(), c2b = _mm256_setzero_ps(),
           c3a = _mm256_setzero_ps(), c3b = _mm256_setzero_ps(), c4a = _mm256_setzero_ps(),
           c4b = _mm256_setzero_ps(), c5a = _mm256_setzero_ps(), c5b = _mm256_setzero_ps();
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const float* const end = bp + k * 16;
    for (; bp != end; bp += 16, a0 += csa, a1 += csa, a2 += csa, a3 += csa, a4 += csa, a5 += csa) {
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        const __m256 x0 = _mm256_broadcast_ss(a0);
        c0a = _mm256_fmadd_ps(x0, b0, c0a);
        c0b = _mm256_fmadd_ps(x0, b1, c0b);
        const __m256 x1 = _mm256_broadcast_ss(a1);
        c1a = _mm256_fmadd_ps(x1, b0, c1a);
        c1b = _mm256_fmadd_ps(x1, b1, c1b);
        const __m256 x2 = _mm256_broadcast_ss(a2);
        c2a = _mm256_fmadd_ps(x2, b0, c2a);
        c2b = _mm256_fmadd_ps(x2, b1, c2b);
        const __m256 x3 = _mm256_broadcast_ss(a3);
        c3a = _mm256_fmadd_ps(x3, b0, c3a);
        c3b = _mm256_fmadd_ps(x3, b1, c3b);
        const __m256 x4 = _mm256_broadcast_ss(a4);
        c4a = _mm256_fmadd_ps(x4, b0, c4a);
        c4b = _mm256_fmadd_ps(x4, b1, c4b);
        const __m256 x5 = _mm256_broadcast_ss(a5);
        c5a = _mm256_fmadd_ps(x5, b0, c5a);
        c5b = _mm256_fmadd_ps(x5, b1, c5b);
    }
    _mm256_storeu_ps(tile + 0, c0a);
    _mm256_storeu_ps(tile + 8, c0b);
    _mm256_storeu_ps(tile + 16, c1a);
    _mm256_storeu_ps(tile + 24, c1b);
    _mm256_storeu_ps(tile + 32, c2a);
    _mm256_storeu_ps(tile + 40, c2b);
    _mm256_storeu_ps(tile + 48, c3a);
    _mm256_storeu_ps(tile + 56, c3b);
    _mm256_storeu_ps(tile + 64, c4a);
    _mm256_storeu_ps(tile + 72, c4b);
    _mm256_storeu_ps(tile + 80, c5a);
    _mm256_storeu_ps(tile + 88, c5b);
}

/// The register tile in AVX2 + FMA, double: 6 rows x 8 columns in twelve registers.
HEADWISE_TARGET_AVX2 __attribute__((noinline)) inline void panel_tile_avx2(
    Index k, const double* const* a, Index csa, const double* bp, double* tile) {
    __m256d c0a = _mm256_setzero_pd(), c0b = _mm256_setzero_pd(), c1a = _mm256_setzero_pd(),
            c1b = _mm256_setzero_pd(), c2a = _mm256_setzero_pd(), c2b = _mm256_setzero_pd(),
            c3a = _mm256_setzero_pd(), c3b = _mm256_setzero_pd(), c4a = _mm256_setzero_pd(),
            c4b = _mm256_setzero_pd(), c5a = _mm256_setzero_pd(), c5b = _mm256_setzero_pd();
    const double *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const double* const end = bp + k * 8;
    for (; bp != end; bp += 8, a0 += csa, a1 += csa, a2 += csa, a3 += csa, a4 += csa, a5 += csa) {
        const __m256d b0 = _mm256_loadu_pd(bp), b1 = _mm256_loadu_pd(bp + 4);
        const __m256d x0 = _mm256_broadcast_sd(a0);
        c0a = _mm256_fmadd_pd(x0, b0, c0a);
        c0b = _mm256_fmadd_pd(x0, b1, c0b);
        const __m256d x1 = _mm256_broadcast_sd(a1);
        c1a = _mm256_fmadd_pd(x1, b0, c1a);
        c1b = _mm256_fmadd_pd(x1, b1, c1b);
        const __m256d x2 = _mm256_broadcast_sd(a2);
        c2a = _mm256_fmadd_pd(x2, b0, c2a);
        c2b = _mm256_fmadd_pd(x2, b1, c2b);
        const __m256d x3 = _mm256_broadcast_sd(a3);
        c3a = _mm256_fmadd_pd(x3, b0, c3a);
        c3b = _mm256_fmadd_pd(x3, b1, c3b);
        const __m256d x4 = _mm256_broadcast_sd(a4);
        c4a = _mm256_fmadd_pd(x4, b0, c4a);
        c4b = _mm256_fmadd_pd(x4, b1, c4b);
        const __m256d x5 = _mm256_broadcast_sd(a5);
        c5a = _mm256_fmadd_pd(x5, b0, c5a);
        c5b = _mm256_fmadd_pd(x5, b1, c5b);
    }
    _mm256_storeu_pd(tile + 0, c0a);
    _mm256_storeu_pd(tile + 4, c0b);
    _mm256_storeu_pd(tile + 8, c1a);
    _mm256_storeu_pd(tile + 12, c1b);
    _mm256_storeu_pd(tile + 16, c2a);
    _mm256_storeu_pd(tile + 20, c2b);
    _mm256_storeu_pd(tile + 24, c3a);
    _mm256_storeu_pd(tile + 28, c3b);
    _mm256_storeu_pd(tile + 32, c4a);
    _mm256_storeu_pd(tile + 36, c4b);
    _mm256_storeu_pd(tile + 40, c5a);
    _mm256_storeu_pd(tile + 44, c5b);
}
#endif

/// Whether the packed products run the AVX2 register tile on `level` (one this CPU runs; by
/// default what it runs), else the portable one.
inline bool packed_panels_vectorised(SimdLevel level = cpu_simd_level()) noexcept {
    return level != SimdLevel::none;
}

/// C[m, n] = alpha A[m, k] B[k, n0 : n0 + n]  (+ C when `accumulate`; else C is only written),
/// with A(i, p) = a[i * rsa + p * csa] read in place and B packed (pack_panels, rows from the
/// one B(0, .) of `b` on). C is row-major with row stride ldc and must not overlap A or B.
/// `vectorised` picks the AVX2 tile (which must be available) or the portable one.
template <class T>
void packed_gemm(Index m, Index n, Index k, T alpha, const T* a, Index rsa, Index csa,
                 PackedPanels<T> b, Index n0, bool accumulate, T* c, Index ldc,
                 bool vectorised = packed_panels_vectorised()) {
    constexpr Index W = kPanelWidth<T>, MR = kPanelRows;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // an empty sum
        if (!accumulate)
            for (Index i = 0; i < m; ++i)
                for (Index j = 0; j < n; ++j) c[i * ldc + j] = T(0);
        return;
    }
    alignas(64) T tile[MR * W];
    const Index q_first = n0 / W, q_last = (n0 + n - 1) / W;
    // Panel by panel (its k x W block stays in L1 for every row tile), row tile by row tile.
    for (Index q = q_first; q <= q_last; ++q) {
        const T* bp = b.data + q * b.panel_stride;
        const Index j_begin = std::max(n0, q * W), j_end = std::min(n0 + n, q * W + W);
        for (Index i0 = 0; i0 < m; i0 += MR) {
            const Index mr = std::min(MR, m - i0);
            const T* rows[MR];
            for (Index ii = 0; ii < MR; ++ii) rows[ii] = a + (i0 + (ii < mr ? ii : 0)) * rsa;
#if HEADWISE_X86_DISPATCH
            if (vectorised)
                panel_tile_avx2(k, rows, csa, bp, tile);
            else
                panel_tile_portable<T>(k, rows, csa, bp, tile);
#else
            static_cast<void>(vectorised);
            panel_tile_portable<T>(k, rows, csa, bp, tile);
#endif
            const Index w = j_end - j_begin;
            for (Index ii = 0; ii < mr; ++ii) {
                T* out = c + (i0 + ii) * ldc + (j_begin - n0);   // C's columns j_begin - n0 ..
                const T* t = tile + ii * W + (j_begin - q * W);  // the tile's matching columns
                if (accumulate)
                    for (Index j = 0; j < w; ++j) out[j] += alpha * t[j];
                else
                    for (Index j = 0; j < w; ++j) out[j] = alpha * t[j];
            }
        }
    }
}

}  // namespace headwise::detail
