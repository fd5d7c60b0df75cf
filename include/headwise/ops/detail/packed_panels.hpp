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

/// One register tile, portable: C[ii][jj] = alpha sum_p a[ii][p * csa] bp[p W + jj] (+ C[ii][jj]
/// when `accumulate`) for ii < kPanelRows, jj < W (rows of `a` and `c` past the valid ones point
/// at a valid row, and the caller keeps only the valid rows' results).
template <class T>
void panel_tile_portable(Index k, const T* const* a, Index csa, const T* bp, T* const* c, T alpha,
                         bool accumulate) {
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
        for (Index jj = 0; jj < W; ++jj) {
            const T t = alpha * acc[ii][jj];
            c[ii][jj] = accumulate ? c[ii][jj] + t : t;
        }
}

#if HEADWISE_X86_DISPATCH
/// C's row piece = alpha (lo, hi) (+ the row piece when `accumulate`): a multiplication, then an
/// addition (no fused multiply-add), as the portable tile rounds it.
HEADWISE_TARGET_AVX2 inline void put_row_avx2(float* row, __m256 lo, __m256 hi, __m256 alpha,
                                              bool accumulate) {
    lo = _mm256_mul_ps(alpha, lo);
    hi = _mm256_mul_ps(alpha, hi);
    if (accumulate) {
        lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);
        hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);
    }
    _mm256_storeu_ps(row, lo);
    _mm256_storeu_ps(row + 8, hi);
}

HEADWISE_TARGET_AVX2 inline void put_row_avx2(double* row, __m256d lo, __m256d hi, __m256d alpha,
                                              bool accumulate) {
    lo = _mm256_mul_pd(alpha, lo);
    hi = _mm256_mul_pd(alpha, hi);
    if (accumulate) {
        lo = _mm256_add_pd(_mm256_loadu_pd(row), lo);
        hi = _mm256_add_pd(_mm256_loadu_pd(row + 4), hi);
    }
    _mm256_storeu_pd(row, lo);
    _mm256_storeu_pd(row + 4, hi);
}

/// The register tile in AVX2 + FMA, float: 6 rows x 16 columns in twelve registers, written to
/// the rows `c` as the portable tile writes them (C's rows directly where the tile lies whole
/// inside C, which saves a pass through a buffer: 5% of a forward slice). Not inlined:
/// inlined into packed_gemm, GCC 12 kept the caller's loop invariants in vector registers and
/// spilled a B vector to the stack inside the k loop (the forward slice at L = 4096 ran 1.5x
/// slower).
HEADWISE_TARGET_AVX2 __attribute__((noinline)) inline void panel_tile_avx2(
    Index k, const float* const* a, Index csa, const float* bp, float* const* c, float alpha,
    bool accumulate) {
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
    const __m256 al = _mm256_set1_ps(alpha);
    put_row_avx2(c[0], c0a, c0b, al, accumulate);
    put_row_avx2(c[1], c1a, c1b, al, accumulate);
    put_row_avx2(c[2], c2a, c2b, al, accumulate);
    put_row_avx2(c[3], c3a, c3b, al, accumulate);
    put_row_avx2(c[4], c4a, c4b, al, accumulate);
    put_row_avx2(c[5], c5a, c5b, al, accumulate);
}

/// The register tile in AVX2 + FMA, double: 6 rows x 8 columns in twelve registers.
HEADWISE_TARGET_AVX2 __attribute__((noinline)) inline void panel_tile_avx2(
    Index k, const double* const* a, Index csa, const double* bp, double* const* c, double alpha,
    bool accumulate) {
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
    const __m256d al = _mm256_set1_pd(alpha);
    put_row_avx2(c[0], c0a, c0b, al, accumulate);
    put_row_avx2(c[1], c1a, c1b, al, accumulate);
    put_row_avx2(c[2], c2a, c2b, al, accumulate);
    put_row_avx2(c[3], c3a, c3b, al, accumulate);
    put_row_avx2(c[4], c4a, c4b, al, accumulate);
    put_row_avx2(c[5], c5a, c5b, al, accumulate);
}
#endif

/// Whether the packed products run the AVX2 register tile on `level` (one this CPU runs; by
/// default what it runs), else the portable one.
inline bool packed_panels_vectorised(SimdLevel level = cpu_simd_level()) noexcept {
    return level != SimdLevel::none;
}

/// The part of a product a causal tile needs (a lower band): row i of C needs only its columns
/// j < i + cols, and row i of A is 0 outside [i + k_first, i + k_end). The default needs all.
/// A register tile of rows i .. i + 5 computes the columns before the last row's end and the
/// sum over p from the first row's k_first to the last row's k_end, so what it leaves out is
/// wholly outside the band.
struct PanelBand {
    static constexpr Index kAll = Index(1) << 40;
    Index cols = kAll;      // row i needs C's columns [0, i + cols)
    Index k_first = -kAll;  // row i of A is 0 before column i + k_first
    Index k_end = kAll;     // ... and from column i + k_end on
};

/// C[m, n] = alpha A[m, k] B[k, n0 : n0 + n]  (+ C when `accumulate`; else C is only written),
/// with A(i, p) = a[i * rsa + p * csa] read in place and B packed (pack_panels, rows from the
/// one B(0, .) of `b` on). C is row-major with row stride ldc and must not overlap A or B.
/// `vectorised` picks the AVX2 tile (which must be available) or the portable one. With a `band`,
/// a register tile's columns past the band are written 0 (left alone when accumulating), and A's
/// entries outside it are not read.
template <class T>
void packed_gemm(Index m, Index n, Index k, T alpha, const T* a, Index rsa, Index csa,
                 PackedPanels<T> b, Index n0, bool accumulate, T* c, Index ldc,
                 bool vectorised = packed_panels_vectorised(), const PanelBand& band = {}) {
    constexpr Index W = kPanelWidth<T>, MR = kPanelRows;
    if (m <= 0 || n <= 0) return;
    alignas(64) T tile[MR * W];
    const Index q_first = n0 / W, q_last = (n0 + n - 1) / W;
    // Panel by panel (its k x W block stays in L1 for every row tile), row tile by row tile.
    for (Index q = q_first; q <= q_last; ++q) {
        const T* bp = b.data + q * b.panel_stride;
        const Index j_begin = std::max(n0, q * W), j_end = std::min(n0 + n, q * W + W);
        const Index w = j_end - j_begin, cj = j_begin - n0;  // C's columns cj .. cj + w
        for (Index i0 = 0; i0 < m; i0 += MR) {
            const Index mr = std::min(MR, m - i0);
            // The band of rows i0 .. i0 + mr: columns before the last row's end, and A's
            // columns [p0, p1) (an empty sum: C = 0, or C unchanged when accumulating).
            const bool cols_needed = cj < i0 + mr - 1 + band.cols;
            const Index p0 = std::max<Index>(0, std::min(k, i0 + band.k_first));
            const Index p1 = std::max(p0, std::min(k, i0 + mr - 1 + band.k_end));
            if (!cols_needed || p1 == p0) {
                if (!accumulate)
                    for (Index ii = 0; ii < mr; ++ii)
                        for (Index j = 0; j < w; ++j) c[(i0 + ii) * ldc + cj + j] = T(0);
                continue;
            }
            const T* rows[MR];
            for (Index ii = 0; ii < MR; ++ii)
                rows[ii] = a + (i0 + (ii < mr ? ii : 0)) * rsa + p0 * csa;
            // A whole tile inside C is written in place; an edge tile goes through `tile`.
            const bool whole = mr == MR && w == W && j_begin == q * W;
            T* out[MR];
            for (Index ii = 0; ii < MR; ++ii)
                out[ii] = whole ? c + (i0 + ii) * ldc + cj : tile + ii * W;
            const T* bk = bp + p0 * W;
            const Index kk = p1 - p0;
#if HEADWISE_X86_DISPATCH
            if (vectorised)
                panel_tile_avx2(kk, rows, csa, bk, out, whole ? alpha : T(1), whole && accumulate);
            else
                panel_tile_portable<T>(kk, rows, csa, bk, out, whole ? alpha : T(1),
                                       whole && accumulate);
#else
            static_cast<void>(vectorised);
            panel_tile_portable<T>(kk, rows, csa, bk, out, whole ? alpha : T(1),
                                   whole && accumulate);
#endif
            if (whole) continue;
            for (Index ii = 0; ii < mr; ++ii) {
                T* o = c + (i0 + ii) * ldc + cj;                 // C's columns cj ..
                const T* t = tile + ii * W + (j_begin - q * W);  // the tile's matching columns
                if (accumulate)
                    for (Index j = 0; j < w; ++j) o[j] += alpha * t[j];
                else
                    for (Index j = 0; j < w; ++j) o[j] = alpha * t[j];
            }
        }
    }
}

}  // namespace headwise::detail
