// SPDX-License-Identifier: MIT
// Blocked (FlashAttention-2 style) attention for one (batch, head) slice: forward and backward
// kernels that never hold the [L, S] probabilities, only one log-sum-exp per query row.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <algorithm>    // std::min, std::max
#include <cmath>        // std::exp, std::log, std::isnan
#include <cstdint>      // std::uint64_t
#include <limits>       // std::numeric_limits
#include <string>       // std::to_string
#include <type_traits>  // std::is_same_v

#include "../config.hpp"
#include "../error.hpp"
#include "../tensor.hpp"
#include "detail/packed_panels.hpp"
#include "detail/softmax_rows.hpp"
#include "dropout.hpp"
#include "gemm.hpp"
#include "score_mask.hpp"

#if HEADWISE_X86_DISPATCH
#include <immintrin.h>  // AVX2 and FMA intrinsics (usable under a target attribute)
#endif

// The same attention as ops/attention.hpp (Vaswani et al. 2017, Eq. 1),
//   O = dropout(softmax(scale Q K^T + bias, masked = -inf)) V,
// computed tile by tile (Dao 2023, "FlashAttention-2", Algorithms 1 and 2): a block of Br query
// rows meets a block of Bc keys at a time, and softmax is computed online, with a running max m
// and a running sum l per row. Forward keeps O and LSE = m + log(l) per row; backward recomputes
// each tile's probabilities from LSE. Memory is O((L + S) D + Br Bc) instead of O(L S), and the
// tiles stay in the L1/L2 caches instead of streaming [L, S] matrices through memory.
//
// Conventions shared with ops/attention.hpp: the same ScoreMask (every mask kind, appended keys
// never masked), the same counter-based dropout stream (so both kernels drop the same entries),
// a row that can see no key gives zero output and zero gradients. A NaN score makes its row's
// output NaN (never silently 0). Tiles that the mask hides completely (above a causal diagonal,
// a block of padded keys, a block the boolean mask hides) are skipped, and in a tile across the
// causal diagonal the packed products leave out the register tiles (6 rows by 16 keys in float)
// wholly above it, in forward and backward: a causal call does little more than half the work.
//
// Packing: the products read K and V (forward) and K, V, Q, dO (backward) from panels packed
// once (detail/packed_panels.hpp): forward packs K^T and V once per call, and every query block
// reuses them; backward packs Q and dO once per call and each key block's K^T, K and V^T once
// for all the query blocks that meet it. A GEMM library would pack them again for every tile
// product (at L = 4096, D = 64, a third of the time on OpenBLAS). The scores and probabilities
// (A operands) are read in place. Measured on an AVX2 machine (Zen 3, one thread, L = S = 4096,
// D = 64, float): one slice's forward 84.5 -> 64.5 ms, causal 44.8 -> 35.0, backward 174 -> 163,
// causal 97 -> 87; the layer (1, 4096, 512, 8) 1.25x faster unmasked, 1.06-1.09x causal. Where the
// CPU has no AVX2 + FMA the products go to ops::gemm as before (the portable register tile exists
// for the tests and for CPUs without a BLAS). The choice is made per call from the instruction set
// the kernels' detail:: forms take as an argument (the public kernels pass cpu_simd_level()), so
// the tests run both paths on a CPU with AVX2.

namespace headwise::ops {

/// Tile sizes of the blocked kernels: a block of `rows` query rows (Br) against a block of `cols`
/// keys (Bc). The defaults keep backward's two [Br, Bc] tiles (128 KiB each in float) and the
/// [Bc, D] key and value blocks in a 1 MiB L2 cache for head dims up to 128; measured on the
/// benchmark machine (AVX-512, D = 64, L = S = 2048 and 4096), 128 x 256 was the fastest of
/// {64, 128, 256} x {128, 256, 512} when every tile product went through the GEMM library:
/// smaller tiles paid its per-product packing more often (measured before the packed panels).
struct AttentionTiles {
    Index rows = 128;  // Br
    Index cols = 256;  // Bc
};

/// Elements of a [k, n] matrix packed into column panels, for float and double alike (n rounded
/// up to the widest panel, 16 columns).
inline constexpr Index blocked_attention_packed(Index k, Index n) { return (n + 15) / 16 * 16 * k; }

/// Scratch elements (of T) blocked_attention_forward needs for S keys of head dims D and Dv: a
/// tile, the running max and sum, and K^T and V packed.
inline Index blocked_attention_forward_scratch(const AttentionTiles& tiles, Index S, Index D,
                                               Index Dv) {
    return tiles.rows * tiles.cols + 2 * tiles.rows + blocked_attention_packed(D, S) +
           blocked_attention_packed(S, Dv);
}

/// Scratch elements (of T) blocked_attention_backward needs for L query rows and S keys: two
/// tiles, Delta [L], Q and dO packed, and one key block's K^T, K and V^T packed.
inline Index blocked_attention_backward_scratch(const AttentionTiles& tiles, Index L, Index S,
                                                Index D, Index Dv) {
    const Index c = std::min(tiles.cols, std::max<Index>(S, 1));
    return 2 * tiles.rows * tiles.cols + L + blocked_attention_packed(L, D) +
           blocked_attention_packed(L, Dv) + blocked_attention_packed(D, c) +
           blocked_attention_packed(c, D) + blocked_attention_packed(Dv, c);
}

/// Scratch elements (of T) blocked_attention_weights needs: one tile.
inline Index blocked_attention_weights_scratch(const AttentionTiles& tiles) {
    return tiles.rows * tiles.cols;
}

/// Column vector argument of a kernel (e.g. the [L] log-sum-exp), contiguous.
template <class T>
using VectorRef = Eigen::Ref<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstVectorRef = Eigen::Ref<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

/// Forward of one slice, tile by tile (FlashAttention-2, Algorithm 1). Writes O and LSE:
///   LSE[i] = log sum_j exp(S[i, j])  over the visible keys of row i    [L]
///            (+infinity for a row that can see no key, so that backward's exp(S - LSE) is 0)
///   O[i]   = sum_j dropout(exp(S[i, j] - LSE[i])) V[j]                  [L, Dv]
/// `scratch` holds blocked_attention_forward_scratch(tiles, S, D, Dv) elements. Q, K, V may be
/// strided
/// column blocks; O must not overlap them.
template <class T>
void blocked_attention_forward(ConstMatrixRef<T> Q,  // [L, D]
                               ConstMatrixRef<T> K,  // [S, D]
                               ConstMatrixRef<T> V,  // [S, Dv]
                               const ScoreMask<T>& mask, T scale, const Dropout& dropout,
                               std::uint64_t dropout_stream, const AttentionTiles& tiles,
                               T* scratch,
                               VectorRef<T> LSE,  // [L] out
                               MatrixRef<T> O);   // [L, Dv] out

/// Backward of one slice, tile by tile (FlashAttention-2, Algorithm 2), given forward's O and LSE.
/// Every gradient is *added* to dQ, dK, dV. `scratch` holds
/// blocked_attention_backward_scratch(tiles, L, S, D, Dv) elements.
///   Delta = rowsum(dO ⊙ O)                                  [L]
///   per tile: P = exp(scale Q_i K_j^T + mask - LSE_i),  A = dropout(P)
///             dV_j += A^T dO_i,  dP = dropout(dO_i V_j^T),  dS = P ⊙ (dP - Delta_i)
///             dQ_i += scale dS K_j,  dK_j += scale dS^T Q_i
template <class T>
void blocked_attention_backward(ConstMatrixRef<T> Q,    // [L, D]
                                ConstMatrixRef<T> K,    // [S, D]
                                ConstMatrixRef<T> V,    // [S, Dv]
                                ConstMatrixRef<T> O,    // [L, Dv] forward's output
                                ConstVectorRef<T> LSE,  // [L] forward's log-sum-exp
                                const ScoreMask<T>& mask, T scale, const Dropout& dropout,
                                std::uint64_t dropout_stream, const AttentionTiles& tiles,
                                ConstMatrixRef<T> dO,  // [L, Dv]
                                T* scratch,
                                MatrixRef<T> dQ,   // [L, D]  +=
                                MatrixRef<T> dK,   // [S, D]  +=
                                MatrixRef<T> dV);  // [S, Dv] +=

/// The attention weights of one slice, recomputed from forward's log-sum-exp (for a caller that
/// asks for them on the blocked path: one more Q K^T per slice, no [L, S] buffer besides W):
///   W += alpha dropout(exp(scale Q K^T + mask - LSE))     [L, S]
/// tile by tile; hidden tiles add nothing. `scratch` holds blocked_attention_weights_scratch(tiles)
/// elements (blocked_attention_forward_scratch's are more). With alpha = 1 and W zero it writes the
/// slice's weights after dropout, exactly the materialised kernel's A (to rounding); summing the
/// heads of a batch into one W averages them.
template <class T>
void blocked_attention_weights(ConstMatrixRef<T> Q,  // [L, D]
                               ConstMatrixRef<T> K,  // [S, D]
                               const ScoreMask<T>& mask, T scale, const Dropout& dropout,
                               std::uint64_t dropout_stream, ConstVectorRef<T> LSE,  // [L]
                               const AttentionTiles& tiles, T* scratch, T alpha,
                               MatrixRef<T> W);  // [L, S] +=

/// True when `mask` hides every score of the tile rows [i0, i0 + r) x keys [j0, j0 + c) of a
/// slice with S keys, so that the tile contributes nothing and may be skipped.
template <class T>
bool tile_hidden(const ScoreMask<T>& mask, Index S, Index i0, Index r, Index j0, Index c);

// ------------------------------------------------------------------------------------------------

}  // namespace headwise::ops

// Helpers of the blocked kernels (headwise::detail: an ops::detail would hide headwise::detail
// from the other kernels of headwise::ops).
namespace headwise::detail {

/// max(a, b), NaN when either is NaN (std::max keeps whichever argument compares first).
template <class T>
T max_nan(T a, T b) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return a < b ? b : a;
}

#if HEADWISE_X86_DISPATCH
/// exp_shifted_sum (softmax_rows.hpp) for float in AVX2 + FMA, for the shifts of the blocked
/// kernels, which leave x - shift <= 0 up to rounding (the row's running max, or its log-sum-exp):
/// the same range reduction and Taylor polynomial, but k = round((x - shift) / ln 2) comes from
/// adding 1.5 2^23 + 127 (its low bits are then k + 127, the exponent field of 2^k) and 2^k from
/// shifting those bits: 18 instructions per 8 entries instead of 28 (2^k in two factors, for the
/// subnormal results and the overflow that x - shift <= 0 never has), where exp was 16% of a
/// forward slice at L = 4096. The results are the same to within one rounding of k's product (a
/// tie of x log2(e) at half an integer can round to the other k, and the polynomial then takes r
/// on the other side of 0): within 1 ulp. Entries below log(smallest normal float) are 0, NaN
/// stays NaN, and x - shift above 88 gives exp(88) (not infinity: such a shift is not the max).
HEADWISE_TARGET_AVX2 inline __m256 exp_nonpositive_avx2(__m256 z) {
    using namespace simd;
    const __m256 keep = _mm256_cmp_ps(z, _mm256_set1_ps(kLogFloatMin), _CMP_NLT_UQ);  // or NaN
    // k + 127 in [0, 254]: z in [-88, 88] (a NaN z stays NaN: min and max return the 2nd operand)
    z = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-88.0f), z));
    const __m256 magic = _mm256_set1_ps(12582912.0f + 127.0f);           // 1.5 2^23 + 127
    const __m256 t = _mm256_fmadd_ps(z, _mm256_set1_ps(kLog2e), magic);  // low bits: k + 127
    const __m256 k = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), z);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kTaylor[7]);
    for (int i = 6; i >= 0; --i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kTaylor[i]));
    const __m256 two_k = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
    return _mm256_and_ps(keep, _mm256_mul_ps(p, two_k));
}

HEADWISE_TARGET_AVX2 inline float exp_nonpositive_sum_avx2(const float* x, float shift, float* y,
                                                           Index n) {
    const __m256 s = _mm256_set1_ps(shift);
    __m256 sum = _mm256_setzero_ps();
    Index j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
        _mm256_storeu_ps(y + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (j < n) {
        const __m256i tail = simd::first_lanes_avx2(n - j);
        const __m256 z = _mm256_sub_ps(_mm256_maskload_ps(x + j, tail), s);
        const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(tail), exp_nonpositive_avx2(z));
        _mm256_maskstore_ps(y + j, tail, e);
        sum = _mm256_add_ps(sum, e);
    }
    return simd::sum_lanes_avx2(sum);
}
#endif

/// y = exp(x - shift) and its sum, as exp_shifted_sum, for a shift that leaves x - shift <= 0
/// (up to rounding): the AVX2 form above on an AVX2 CPU, else exp_shifted_sum.
template <class T>
T exp_nonpositive_sum(const T* x, T shift, T* y, Index n) {
#if HEADWISE_X86_DISPATCH
    if constexpr (std::is_same_v<T, float>)
        if (cpu_simd_level() == SimdLevel::avx2) return exp_nonpositive_sum_avx2(x, shift, y, n);
#endif
    return exp_shifted_sum(x, shift, y, n);
}

/// P = exp(S - LSE) row by row in place, forward's probabilities recomputed: 0 for a row that
/// sees nothing (LSE = +inf), NaN for a row forward made NaN (LSE = NaN); entries whose exponent
/// is below the smallest normal T are exactly 0 (softmax_rows.hpp).
template <class T>
void exp_rows_from_lse(MatrixMap<T>& P, const T* LSE) {
    constexpr T kInf = std::numeric_limits<T>::infinity();
    for (Index k = 0; k < P.rows(); ++k) {
        if (LSE[k] == kInf) {
            P.row(k).setZero();
        } else {
            T* row = P.data() + k * P.outerStride();
            exp_nonpositive_sum(row, LSE[k], row, P.cols());
        }
    }
}

/// The column of the row's entry equal to 1 (the row's whole probability on one key), or -1.
template <class T>
Index whole_probability_key(const T* P, Index c) {
    // Most rows have no such entry: their largest entry, found vectorised (Eigen's maxCoeff), is
    // below 1 (the search entry by entry took 6% of a backward slice at L = 4096). A NaN is not
    // 1, whether maxCoeff skips it or not.
    if (c == 0 || Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(P, c).maxCoeff() < T(1))
        return -1;
    for (Index j = 0; j < c; ++j)
        if (P[j] == T(1)) return j;
    return -1;
}

/// True when o == a v, entry by entry, with the product rounded as forward's P V rounds it.
template <class RowO, class RowV, class T>
bool row_is_scaled(const RowO& o, const RowV& v, T a) {
    for (Index d = 0; d < o.size(); ++d)
        if (!(o(d) == a * v(d))) return false;
    return true;
}

/// What dropout multiplies a probability of 1 at entry (i, j) of `stream` by: 1 without
/// dropout, else 0 or 1 / (1 - p), exactly as dropout_apply does.
template <class T>
T dropout_factor(const ops::Dropout& dropout, std::uint64_t stream, Index i, Index j) {
    if (!dropout.active()) return T(1);
    Eigen::Matrix<T, 1, 1, Eigen::RowMajor> a;
    a(0, 0) = T(1);
    ops::dropout_apply(dropout, stream, i, j, a, a);
    return a(0, 0);
}

/// True when every entry of X is finite: the sum of X * 0 is 0, or NaN if any entry is NaN or an
/// infinity (one vectorised pass, where Eigen's allFinite() compares entry by entry).
template <class Matrix>
bool all_finite(const Matrix& X) {
    using T = typename Matrix::Scalar;
    return X.size() == 0 || (X.array() * T(0)).sum() == T(0);
}

}  // namespace headwise::detail

namespace headwise::ops {

template <class T>
bool tile_hidden(const ScoreMask<T>& mask, Index S, Index i0, Index r, Index j0, Index c) {
    if (j0 + c > mask.covered(S)) return false;  // appended keys (bias_k, zero attention) show
    // Causal: causal_end is non-decreasing in the row, so the tile is hidden when its first key
    // is at or past the last row's end.
    if (mask.causal && j0 >= mask.causal_end(i0 + r - 1, S)) return true;
    if (mask.key_padding) {
        bool all = true;
        for (Index j = j0; j < j0 + c && all; ++j) all = mask.key_padding[j];
        if (all) return true;
    }
    if (mask.mask) {
        bool all = true;
        for (Index i = i0; i < i0 + r && all; ++i) {
            const bool* m = mask.mask + i * mask.mask_ld;
            for (Index j = j0; j < j0 + c && all; ++j) all = m[j];
        }
        if (all) return true;
    }
    return false;
}

}  // namespace headwise::ops

namespace headwise::detail {

/// How many of a tile's c columns (keys j0 .. j0 + c) need computing for rows i0 .. i0 + r: 0
/// when the mask hides the whole tile, fewer than c when the causal rule hides its trailing
/// columns from every row (a tile across the diagonal: causal_end grows with the row, so the
/// last row sees the most), else c. The library's NaN rule (NaN in, NaN out) holds under masks:
/// a hidden NaN score stays NaN, and a hidden key's NaN value still reaches the output as 0 * NaN,
/// as in the materialised kernel. So nothing is left out when Q, K or V hold a NaN or an
/// infinity (`finite`, checked once per slice), nor a hidden part whose bias holds a NaN.
template <class T>
Index tile_columns(const ops::ScoreMask<T>& mask, Index S, Index i0, Index r, Index j0, Index c,
                   bool finite) {
    if (!finite) return c;
    Index n = c;
    if (ops::tile_hidden(mask, S, i0, r, j0, c)) {
        n = 0;
    } else if (mask.causal && j0 + c <= mask.covered(S)) {
        n = std::min(c, std::max<Index>(0, mask.causal_end(i0 + r - 1, S) - j0));
    }
    if (n < c && mask.bias)
        for (Index i = i0; i < i0 + r; ++i)
            for (Index j = j0 + n; j < j0 + c; ++j)
                if (std::isnan(mask.bias[i * mask.bias_ld + j])) return c;
    return n;
}

/// How far into a tile's columns (keys j0 ..) row k of the tile (query i0 + k) sees under the
/// causal rule: keys j < k + causal_reach, when the causal rule is the only thing that cuts the
/// tile's rows short (finite inputs, every column a covered key); else PanelBand::kAll. The packed
/// products leave out the register tiles past it (the triangle of a tile across the diagonal).
template <class T>
Index causal_reach(const ops::ScoreMask<T>& mask, Index S, Index i0, Index j0, Index c,
                   bool finite) {
    if (!mask.causal || !finite || j0 + c > mask.covered(S)) return PanelBand::kAll;
    return i0 + mask.causal_offset + 1 - j0;
}

/// Throws std::invalid_argument unless both tile extents are positive.
inline void check_tiles(const char* function, const ops::AttentionTiles& tiles,
                        const char* argument = "tiles") {
    if (tiles.rows <= 0 || tiles.cols <= 0)
        throw_invalid_argument(function, argument, "rows and cols must be positive",
                               std::to_string(tiles.rows) + " x " + std::to_string(tiles.cols));
}

/// The tiles of a call of L queries over Sx keys: `tiles` cut to L x Sx (a larger tile covers
/// the slice whole, the same sums with less scratch), at least 1 x 1.
inline ops::AttentionTiles call_tiles(const ops::AttentionTiles& tiles, Index L, Index Sx) {
    return {std::max<Index>(1, std::min(tiles.rows, L)),
            std::max<Index>(1, std::min(tiles.cols, Sx))};
}

}  // namespace headwise::detail

// The kernels' bodies, with the instruction set as an argument: `level` is one this CPU runs
// (cpu_simd_level() or below). Below AVX2 (SimdLevel::none) every tile product goes to ops::gemm
// instead of the packed panels; the public kernels pass cpu_simd_level(), the tests each level.
namespace headwise::detail {

/// ops::blocked_attention_forward on `level`.
template <class T>
void blocked_attention_forward(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, ConstMatrixRef<T> V,
                               const ops::ScoreMask<T>& mask, T scale, const ops::Dropout& dropout,
                               std::uint64_t dropout_stream, const ops::AttentionTiles& tiles,
                               T* scratch, ops::VectorRef<T> LSE, MatrixRef<T> O, SimdLevel level) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::blocked_attention_forward";
    headwise::detail::check_matrix(fn, "K", K, K.rows(), Q.cols());
    headwise::detail::check_matrix(fn, "V", V, K.rows(), V.cols());
    headwise::detail::check_matrix(fn, "O", O, Q.rows(), V.cols());
    headwise::detail::check_matrix(fn, "LSE", LSE, Q.rows(), 1);
    headwise::detail::check_score_mask(fn, mask, K.rows());
    headwise::detail::check_tiles(fn, tiles);
    constexpr T kInf = std::numeric_limits<T>::infinity();
    const Index L = Q.rows(), S = K.rows(), Br = tiles.rows, Bc = tiles.cols;
    T* const tile = scratch;              // [Br, Bc] scores, then probabilities
    T* const m = scratch + Br * Bc;       // [Br] running row max
    T* const l = scratch + Br * Bc + Br;  // [Br] running row sum of exp(S - m)
    const bool finite =
        detail::all_finite(Q) && detail::all_finite(K) && detail::all_finite(V);  // may skip tiles
    // K^T [D, S] and V [S, Dv] packed once, for every query block (see "Packing" above).
    const bool packed = detail::packed_panels_vectorised(level);
    detail::PackedPanels<T> Kt, Vp;
    if (packed) {
        T* const packs = scratch + Br * Bc + 2 * Br;
        Kt = detail::pack_panels(K.data(), 1, K.outerStride(), Q.cols(), S, packs);
        Vp = detail::pack_panels(V.data(), V.outerStride(), 1, S, V.cols(),
                                 packs + ops::blocked_attention_packed(Q.cols(), S));
    }

    // Algorithm 1, line 3: for each block Q_i of Br query rows ...
    for (Index i0 = 0; i0 < L; i0 += Br) {
        const Index r = L - i0 < Br ? L - i0 : Br;
        auto Oi = O.middleRows(i0, r);  // [r, Dv], the accumulator O~_i
        // line 5: O_i = 0, l_i = 0, m_i = -inf.
        Oi.setZero();
        for (Index k = 0; k < r; ++k) {
            m[k] = -kInf;
            l[k] = T(0);
        }
        // line 6: ... and each block K_j, V_j of Bc keys.
        for (Index j0 = 0; j0 < S; j0 += Bc) {
            // Keys the mask hides from every row of the block are left out (a whole tile above
            // the causal diagonal, the hidden end of a tile across it, a block of padding).
            const Index c = detail::tile_columns(mask, S, i0, r, j0, std::min(Bc, S - j0), finite);
            if (c == 0) continue;
            MatrixMap<T> Sij(tile, r, c);  // [r, c]
            // Row k sees the tile's keys j < k + reach (causal); the products leave out the
            // register tiles past that (their scores are written 0, then masked).
            const Index reach = detail::causal_reach(mask, S, i0, j0, c, finite);
            // line 8: S_ij = scale Q_i K_j^T, then the bias and the masks (hidden = -inf).
            if (packed)
                detail::packed_gemm<T>(r, c, Q.cols(), scale, Q.data() + i0 * Q.outerStride(),
                                       Q.outerStride(), 1, Kt, j0, false, Sij.data(), c, true,
                                       {reach});
            else
                ops::gemm<T>(scale, Q.middleRows(i0, r), ops::Op::none, K.middleRows(j0, c),
                             ops::Op::transpose, T(0), Sij);
            ops::apply_score_mask(mask, MatrixRef<T>(Sij), i0, j0);
            // line 9: m_new = max(m_old, rowmax(S_ij)),  P~_ij = exp(S_ij - m_new),
            //         l_new = exp(m_old - m_new) l_old + rowsum(P~_ij).
            // line 10: O~_i = diag(exp(m_old - m_new)) O~_i + P~_ij V_j (the product below).
            // Subtracting the running max keeps every exp <= 1 (no overflow), as in the
            // materialised softmax; rescaling by exp(m_old - m_new) moves earlier tiles onto the
            // new max, so the result equals one softmax over the whole row.
            for (Index k = 0; k < r; ++k) {
                T* row = Sij.data() + k * c;  // S_ij's row k, then P~_ij's
                const T m_new = detail::max_nan(m[k], detail::row_max(row, c));
                if (m_new == -kInf) {  // nothing visible in this row yet
                    Sij.row(k).setZero();
                    continue;
                }
                const T row_sum = detail::exp_nonpositive_sum(row, m_new, row, c);
                const T alpha = std::exp(m[k] - m_new);  // 0 when m_old = -inf
                l[k] = alpha * l[k] + row_sum;
                if (alpha != T(1)) Oi.row(k) *= alpha;
                m[k] = m_new;
            }
            // Dropout on the unnormalised probabilities: dropout(P~) / l = dropout(P~ / l), the
            // same mask as the materialised path (entry (i0 + k, j0 + j) of the stream).
            if (dropout.active()) ops::dropout_apply(dropout, dropout_stream, i0, j0, Sij, Sij);
            if (packed)
                detail::packed_gemm<T>(r, V.cols(), c, T(1), Sij.data(), c, 1, Vp.from_row(j0), 0,
                                       true, Oi.data(), O.outerStride(), true,
                                       {PanelBand::kAll, -PanelBand::kAll, reach});
            else
                ops::gemm<T>(T(1), Sij, ops::Op::none, V.middleRows(j0, c), ops::Op::none, T(1),
                             Oi);
        }
        // line 12: O_i = diag(l_i)^-1 O~_i;  line 13: L_i = m_i + log(l_i).
        // A row with no visible key (m = -inf) keeps O~ = sum 0 V_j: 0, or NaN where a value
        // is NaN, as the materialised P V gives; its LSE = +inf, so that backward's exp(S - LSE)
        // is 0 for it whatever S holds. A NaN score left m (and so O) NaN.
        for (Index k = 0; k < r; ++k) {
            if (m[k] == -kInf) {
                LSE[i0 + k] = kInf;
                continue;
            }
            Oi.row(k) *= T(1) / l[k];
            LSE[i0 + k] = m[k] + std::log(l[k]);
        }
    }
}

/// ops::blocked_attention_backward on `level`.
template <class T>
void blocked_attention_backward(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, ConstMatrixRef<T> V,
                                ConstMatrixRef<T> O, ops::ConstVectorRef<T> LSE,
                                const ops::ScoreMask<T>& mask, T scale, const ops::Dropout& dropout,
                                std::uint64_t dropout_stream, const ops::AttentionTiles& tiles,
                                ConstMatrixRef<T> dO, T* scratch, MatrixRef<T> dQ, MatrixRef<T> dK,
                                MatrixRef<T> dV, SimdLevel level) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::blocked_attention_backward";
    const Index L = Q.rows(), D = Q.cols(), S = K.rows(), Dv = V.cols();
    headwise::detail::check_matrix(fn, "K", K, S, D);
    headwise::detail::check_matrix(fn, "V", V, S, Dv);
    headwise::detail::check_matrix(fn, "O", O, L, Dv);
    headwise::detail::check_matrix(fn, "LSE", LSE, L, 1);
    headwise::detail::check_matrix(fn, "dO", dO, L, Dv);
    headwise::detail::check_matrix(fn, "dQ", dQ, L, D);
    headwise::detail::check_matrix(fn, "dK", dK, S, D);
    headwise::detail::check_matrix(fn, "dV", dV, S, Dv);
    headwise::detail::check_score_mask(fn, mask, S);
    headwise::detail::check_tiles(fn, tiles);
    const Index Br = tiles.rows, Bc = tiles.cols;
    T* const tile_p = scratch;               // [Br, Bc] P_ij
    T* const tile_d = scratch + Br * Bc;     // [Br, Bc] A_ij, then dP_ij, then dS_ij
    T* const delta = scratch + 2 * Br * Bc;  // [L]
    // NaN reaches every gradient the materialised backward would reach, skipped tiles included.
    const bool finite = detail::all_finite(Q) && detail::all_finite(K) && detail::all_finite(V) &&
                        detail::all_finite(dO) && !LSE.hasNaN();
    // Q [L, D] and dO [L, Dv] packed once per call; each key block's K^T [D, c], K [c, D] and
    // V^T [Dv, c] once per block, for every query block that meets it (see "Packing" above).
    const bool packed = detail::packed_panels_vectorised(level);
    T* const packs = scratch + 2 * Br * Bc + L;
    const Index cmax = std::min(Bc, std::max<Index>(S, 1));
    T* const kt_pack =
        packs + ops::blocked_attention_packed(L, D) + ops::blocked_attention_packed(L, Dv);
    T* const k_pack = kt_pack + ops::blocked_attention_packed(D, cmax);
    T* const vt_pack = k_pack + ops::blocked_attention_packed(cmax, D);
    detail::PackedPanels<T> Qp, dOp, Ktj, Kjp, Vtj;
    if (packed) {
        Qp = detail::pack_panels(Q.data(), Q.outerStride(), 1, L, D, packs);
        dOp = detail::pack_panels(dO.data(), dO.outerStride(), 1, L, Dv,
                                  packs + ops::blocked_attention_packed(L, D));
    }

    // Algorithm 2, line 4: Delta = rowsum(dO ⊙ O) = rowsum(dP ⊙ P), the softmax backward's dot
    // product, for every row at once (O = A V gives dO_i . O_i = sum_j dA_ij A_ij = sum_j dP_ij
    // P_ij, dropout included).
    MatrixMap<T>(delta, L, 1) = (dO.array() * O.array()).rowwise().sum().matrix();

    // line 5: for each block K_j, V_j of Bc keys (dK_j, dV_j accumulate across the inner loop) ...
    for (Index j0 = 0; j0 < S; j0 += Bc) {
        const Index cj = std::min(Bc, S - j0);
        bool block_packed = false;  // K_j, V_j packed at the first query block that needs them
        // line 7: ... and each block Q_i of Br query rows, with the keys of the block that some
        // row of Q_i sees (as in forward).
        for (Index i0 = 0; i0 < L; i0 += Br) {
            const Index r = L - i0 < Br ? L - i0 : Br;
            const Index c = detail::tile_columns(mask, S, i0, r, j0, cj, finite);
            if (c == 0) continue;
            auto Kj = K.middleRows(j0, c);    // [c, D]
            auto Vj = V.middleRows(j0, c);    // [c, Dv]
            auto dKj = dK.middleRows(j0, c);  // [c, D]
            auto dVj = dV.middleRows(j0, c);  // [c, Dv]
            auto Qi = Q.middleRows(i0, r);    // [r, D]
            auto dOi = dO.middleRows(i0, r);  // [r, Dv]
            MatrixMap<T> Pij(tile_p, r, c);   // [r, c]
            MatrixMap<T> Dij(tile_d, r, c);   // [r, c]
            if (packed && !block_packed) {
                const T* k = K.data() + j0 * K.outerStride();
                const T* v = V.data() + j0 * V.outerStride();
                Ktj = detail::pack_panels(k, 1, K.outerStride(), D, cj, kt_pack);
                Kjp = detail::pack_panels(k, K.outerStride(), 1, cj, D, k_pack);
                Vtj = detail::pack_panels(v, 1, V.outerStride(), Dv, cj, vt_pack);
                block_packed = true;
            }
            // The causal band of the tile's products, as in forward: row k sees keys j < k + reach;
            // key jj is seen from row jj + 1 - reach on (the products by A^T and dS^T).
            const Index reach = detail::causal_reach(mask, S, i0, j0, c, finite);
            const PanelBand rows_band{reach}, k_end_band{PanelBand::kAll, -PanelBand::kAll, reach};
            const PanelBand k_first_band{PanelBand::kAll,
                                         reach == PanelBand::kAll ? -PanelBand::kAll : 1 - reach};
            // line 9: S_ij = scale Q_i K_j^T (+ bias, masks), as in forward.
            if (packed)
                detail::packed_gemm<T>(r, c, D, scale, Qi.data(), Q.outerStride(), 1, Ktj, 0, false,
                                       Pij.data(), c, true, rows_band);
            else
                ops::gemm<T>(scale, Qi, ops::Op::none, Kj, ops::Op::transpose, T(0), Pij);
            ops::apply_score_mask(mask, MatrixRef<T>(Pij), i0, j0);
            // line 10: P_ij = exp(S_ij - L_i), the forward's probabilities recomputed (0 for a
            // row that sees nothing: LSE = +inf; NaN for a row forward made NaN).
            detail::exp_rows_from_lse(Pij, LSE.data() + i0);
            // line 11: dV_j += A_ij^T dO_i, with A = dropout(P) (A = P without dropout).
            if (dropout.active()) ops::dropout_apply(dropout, dropout_stream, i0, j0, Pij, Dij);
            const MatrixMap<T>& Aij = dropout.active() ? Dij : Pij;
            if (packed)  // A_ij^T read in place: entry (jj, k) at A_ij[k, jj]
                detail::packed_gemm<T>(c, Dv, r, T(1), Aij.data(), 1, c, dOp.from_row(i0), 0, true,
                                       dVj.data(), dV.outerStride(), true, k_first_band);
            else
                ops::gemm<T>(T(1), Aij, ops::Op::transpose, dOi, ops::Op::none, T(1), dVj);
            // line 12: dA_ij = dO_i V_j^T, then dP_ij = dropout(dA_ij) with the same mask.
            if (packed)
                detail::packed_gemm<T>(r, c, Dv, T(1), dOi.data(), dO.outerStride(), 1, Vtj, 0,
                                       false, Dij.data(), c, true, rows_band);
            else
                ops::gemm<T>(T(1), dOi, ops::Op::none, Vj, ops::Op::transpose, T(0), Dij);
            if (dropout.active()) ops::dropout_apply(dropout, dropout_stream, i0, j0, Dij, Dij);
            // line 13: dS_ij = P_ij ⊙ (dP_ij - Delta_i). Hidden entries have P = 0: no gradient.
            // A row whose whole probability went to one key j (P_ij = 1, every other entry below
            // the rounding of 1) and whose output is that key's value alone (O_i = A_ij V_j)
            // has Delta_i = dO_i . O_i = A_ij (dO_i . V_j) = dP_ij: the same dot product as
            // dP_ij, summed in another order. At large |V| the two roundings differ by far more
            // than the true dS_ij (0), and dQ, dK multiply that by |K| and |Q|; so there
            // dP_ij - Delta_i is taken as dP_ij - dP_ij: exactly 0 (NaN for a NaN dP_ij), as the
            // materialised kernel's Σ_k P_ik dP_ik, which is dP_ij itself, gives it.
            for (Index k = 0; k < r; ++k) {
                T* dS = Dij.data() + k * c;  // dP_ij's row k, then dS_ij's
                const Index j = detail::whole_probability_key(Pij.data() + k * c, c);
                const bool one_key =
                    j >= 0 && detail::row_is_scaled(O.row(i0 + k), Vj.row(j),
                                                    detail::dropout_factor<T>(
                                                        dropout, dropout_stream, i0 + k, j0 + j));
                const T dP_one = one_key ? dS[j] : T(0);
                Dij.row(k) = (Pij.row(k).array() * (Dij.row(k).array() - delta[i0 + k])).matrix();
                if (one_key) dS[j] = dP_one - dP_one;
            }
            // line 14: dQ_i += scale dS_ij K_j;  line 15: dK_j += scale dS_ij^T Q_i.
            if (packed) {
                detail::packed_gemm<T>(r, D, c, scale, Dij.data(), c, 1, Kjp, 0, true,
                                       dQ.data() + i0 * dQ.outerStride(), dQ.outerStride(), true,
                                       k_end_band);
                detail::packed_gemm<T>(c, D, r, scale, Dij.data(), 1, c, Qp.from_row(i0), 0, true,
                                       dKj.data(), dK.outerStride(), true, k_first_band);
            } else {
                ops::gemm<T>(scale, Dij, ops::Op::none, Kj, ops::Op::none, T(1),
                             dQ.middleRows(i0, r));
                ops::gemm<T>(scale, Dij, ops::Op::transpose, Qi, ops::Op::none, T(1), dKj);
            }
        }
    }
}

}  // namespace headwise::detail

namespace headwise::ops {

template <class T>
void blocked_attention_forward(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, ConstMatrixRef<T> V,
                               const ScoreMask<T>& mask, T scale, const Dropout& dropout,
                               std::uint64_t dropout_stream, const AttentionTiles& tiles,
                               T* scratch, VectorRef<T> LSE, MatrixRef<T> O) {
    detail::blocked_attention_forward<T>(Q, K, V, mask, scale, dropout, dropout_stream, tiles,
                                         scratch, LSE, O, detail::cpu_simd_level());
}

template <class T>
void blocked_attention_weights(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, const ScoreMask<T>& mask,
                               T scale, const Dropout& dropout, std::uint64_t dropout_stream,
                               ConstVectorRef<T> LSE, const AttentionTiles& tiles, T* scratch,
                               T alpha, MatrixRef<T> W) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::blocked_attention_weights";
    headwise::detail::check_matrix(fn, "K", K, K.rows(), Q.cols());
    headwise::detail::check_matrix(fn, "LSE", LSE, Q.rows(), 1);
    headwise::detail::check_matrix(fn, "W", W, Q.rows(), K.rows());
    headwise::detail::check_score_mask(fn, mask, K.rows());
    headwise::detail::check_tiles(fn, tiles);
    const Index L = Q.rows(), S = K.rows(), Br = tiles.rows, Bc = tiles.cols;
    // A NaN row of forward (LSE NaN) is NaN in every column, skipped tiles included.
    const bool finite = detail::all_finite(Q) && detail::all_finite(K) && !LSE.hasNaN();
    for (Index i0 = 0; i0 < L; i0 += Br) {
        const Index r = L - i0 < Br ? L - i0 : Br;
        for (Index j0 = 0; j0 < S; j0 += Bc) {
            const Index c = detail::tile_columns(mask, S, i0, r, j0, std::min(Bc, S - j0), finite);
            if (c == 0) continue;
            MatrixMap<T> Pij(scratch, r, c);  // [r, c]
            // As backward's step: P_ij = exp(scale Q_i K_j^T + mask - L_i), then dropout.
            gemm<T>(scale, Q.middleRows(i0, r), Op::none, K.middleRows(j0, c), Op::transpose, T(0),
                    Pij);
            apply_score_mask(mask, MatrixRef<T>(Pij), i0, j0);
            detail::exp_rows_from_lse(Pij, LSE.data() + i0);
            if (dropout.active()) dropout_apply(dropout, dropout_stream, i0, j0, Pij, Pij);
            W.block(i0, j0, r, c) += alpha * Pij;
        }
    }
}

template <class T>
void blocked_attention_backward(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, ConstMatrixRef<T> V,
                                ConstMatrixRef<T> O, ConstVectorRef<T> LSE,
                                const ScoreMask<T>& mask, T scale, const Dropout& dropout,
                                std::uint64_t dropout_stream, const AttentionTiles& tiles,
                                ConstMatrixRef<T> dO, T* scratch, MatrixRef<T> dQ, MatrixRef<T> dK,
                                MatrixRef<T> dV) {
    detail::blocked_attention_backward<T>(Q, K, V, O, LSE, mask, scale, dropout, dropout_stream,
                                          tiles, dO, scratch, dQ, dK, dV, detail::cpu_simd_level());
}
}  // namespace headwise::ops
