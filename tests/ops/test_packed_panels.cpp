// SPDX-License-Identifier: MIT
// Tests of headwise/ops/detail/packed_panels.hpp: the packing layout (zero-padded last panel,
// strided and transposed sources) and the product against a plain loop in double, on the AVX2 and
// the portable register tiles, float and double, every edge of a register tile and a panel.
#include <headwise/ops/detail/packed_panels.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::fabs, std::isnan
#include <limits>     // std::numeric_limits
#include <random>     // std::mt19937_64, std::normal_distribution
#include <tuple>      // std::get
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/tolerance.hpp"

namespace test_packed_panels {

using headwise::Index;
namespace detail = headwise::detail;

namespace {

template <class T>
std::vector<T> random_values(Index n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::vector<T> v(static_cast<std::size_t>(n));
    for (T& x : v) x = static_cast<T>(normal(rng));
    return v;
}

/// The register tiles this CPU runs: the portable one, and AVX2 where available.
std::vector<bool> tiles_here() {
    std::vector<bool> t = {false};
    if (detail::packed_panels_vectorised()) t.push_back(true);
    return t;
}

}  // namespace

TEMPLATE_TEST_CASE("pack_panels lays B out in zero-padded panels, from rows or from columns",
                   "[ops][packed]", float, double) {
    using T = TestType;
    constexpr Index W = detail::kPanelWidth<T>;
    const Index k = 3, n = W + 5;  // one whole panel and a partial one
    // B [k, n] stored row-major with a row stride of n + 2, and as X = B^T [n, k] with stride k
    // + 1.
    const std::vector<T> rows = random_values<T>(k * (n + 2), 1);
    std::vector<T> cols(static_cast<std::size_t>(n * (k + 1)));
    for (Index p = 0; p < k; ++p)
        for (Index j = 0; j < n; ++j) cols[j * (k + 1) + p] = rows[p * (n + 2) + j];
    const Index size = detail::packed_size<T>(k, n);
    REQUIRE(size == 2 * W * k);
    std::vector<T> a(static_cast<std::size_t>(size), T(7)), b(a);
    const auto pa = detail::pack_panels(rows.data(), n + 2, 1, k, n, a.data());
    const auto pb = detail::pack_panels(cols.data(), 1, k + 1, k, n, b.data());
    CHECK(pa.panel_stride == k * W);
    CHECK(pb.panel_stride == k * W);
    CHECK(a == b);
    for (Index p = 0; p < k; ++p)
        for (Index j = 0; j < 2 * W; ++j) {
            CAPTURE(p, j);
            const T expected = j < n ? rows[p * (n + 2) + j] : T(0);
            CHECK(a[(j / W) * pa.panel_stride + p * W + j % W] == expected);
        }
}

TEMPLATE_TEST_CASE("packed_gemm equals a plain product, every tile edge, A strided or transposed",
                   "[ops][packed]", float, double) {
    using T = TestType;
    constexpr Index W = detail::kPanelWidth<T>;
    // (m, n, k, n0, transposed A, accumulate): m around the 6-row tile, n and n0 across panel
    // edges, k = 1 and an empty k.
    const auto row = GENERATE_COPY(table<Index, Index, Index, Index, bool, bool>({
        {1, 1, 1, 0, false, false},
        {6, W, 64, 0, false, false},
        {7, W + 1, 5, 0, false, true},
        {5, 3, 9, 2, true, false},
        {13, 2 * W + 3, 17, W - 1, true, true},
        {12, 2 * W, 1, W, false, true},
        {4, 5, 0, 0, false, false},
        {4, 5, 0, 1, false, true},
        {11, W - 2, 33, 1, false, false},
    }));
    const Index m = std::get<0>(row), n = std::get<1>(row), k = std::get<2>(row),
                n0 = std::get<3>(row);
    const bool transposed = std::get<4>(row), accumulate = std::get<5>(row);
    const Index nb = n0 + n;  // B's columns; the product reads n0 .. n0 + n
    const T alpha = T(0.75);
    // A [m, k]: as stored with a row stride k + 3, or read transposed from X [k, m] (stride m + 1).
    const std::vector<T> x = random_values<T>(std::max<Index>(1, m * (k + 3) + k * (m + 1)), 2);
    const Index rsa = transposed ? 1 : k + 3, csa = transposed ? m + 1 : 1;
    const std::vector<T> bvals = random_values<T>(std::max<Index>(1, k * nb), 3);
    std::vector<T> packs(
        static_cast<std::size_t>(std::max<Index>(1, detail::packed_size<T>(k, nb))));
    const auto B = detail::pack_panels(bvals.data(), nb, 1, k, nb, packs.data());
    const Index ldc = n + 2;
    const std::vector<T> c0 = random_values<T>(m * ldc, 4);
    for (const bool vectorised : tiles_here()) {
        CAPTURE(m, n, k, n0, transposed, accumulate, vectorised);
        std::vector<T> c = c0;
        detail::packed_gemm<T>(m, n, k, alpha, x.data(), rsa, csa, B, n0, accumulate, c.data(), ldc,
                               vectorised);
        double worst = 0;
        for (Index i = 0; i < m; ++i) {
            for (Index j = 0; j < n; ++j) {
                double sum = 0, size = 0;
                for (Index p = 0; p < k; ++p) {
                    const double t = static_cast<double>(x[i * rsa + p * csa]) *
                                     static_cast<double>(bvals[p * nb + n0 + j]);
                    sum += t;
                    size += std::fabs(t);
                }
                const double base = accumulate ? static_cast<double>(c0[i * ldc + j]) : 0.0;
                const double expected = base + static_cast<double>(alpha) * sum;
                const double got = static_cast<double>(c[i * ldc + j]);
                const double bound = headwise::test::dot_tolerance<T>(k) *
                                     (std::fabs(base) + static_cast<double>(alpha) * size + 1e-30);
                worst = std::max(worst, std::fabs(got - expected) / bound);
            }
            for (Index j = n; j < ldc; ++j) CHECK(c[i * ldc + j] == c0[i * ldc + j]);  // untouched
        }
        CAPTURE(worst);
        CHECK(worst <= 1.0);
    }
}

TEST_CASE("packed_gemm with accumulate off writes C without reading it", "[ops][packed]") {
    const Index m = 7, n = 19, k = 4;
    const std::vector<float> a = random_values<float>(m * k, 5), b = random_values<float>(k * n, 6);
    std::vector<float> packs(static_cast<std::size_t>(detail::packed_size<float>(k, n)));
    const auto B = detail::pack_panels(b.data(), n, 1, k, n, packs.data());
    for (const bool vectorised : tiles_here()) {
        CAPTURE(vectorised);
        std::vector<float> c(static_cast<std::size_t>(m * n),
                             std::numeric_limits<float>::quiet_NaN());
        detail::packed_gemm<float>(m, n, k, 1.0f, a.data(), k, 1, B, 0, false, c.data(), n,
                                   vectorised);
        for (const float v : c) CHECK_FALSE(std::isnan(v));
    }
}

TEMPLATE_TEST_CASE("packed_gemm with a band computes every entry the band needs", "[ops][packed]",
                   float, double) {
    using T = TestType;
    constexpr Index W = detail::kPanelWidth<T>;
    // A lower band, as a causal tile's products have: (cols) row i needs C's columns j < i + cols,
    // the rest written 0 where a register tile lies wholly past them; (k_first, k_end) row i of A
    // is 0 outside [i + k_first, i + k_end), and the sums skip what a register tile has outside.
    // Bands across several register tiles and panels, one that needs nothing of some rows.
    const auto row = GENERATE_COPY(table<Index, Index, Index, Index, Index, Index, bool>({
        {20, 2 * W + 5, 9, 3, detail::PanelBand::kAll, detail::PanelBand::kAll, false},
        {20, 3 * W, 7, -4, detail::PanelBand::kAll, detail::PanelBand::kAll, false},
        {25, 11, 3 * W + 1, detail::PanelBand::kAll, -detail::PanelBand::kAll, 5, true},
        {25, 11, 3 * W + 1, detail::PanelBand::kAll, -7, detail::PanelBand::kAll, true},
        {13, 2 * W, 40, detail::PanelBand::kAll, 2 - 13, detail::PanelBand::kAll, true},
    }));
    const Index m = std::get<0>(row), n = std::get<1>(row), k = std::get<2>(row);
    const detail::PanelBand band{std::get<3>(row), std::get<4>(row), std::get<5>(row)};
    const bool accumulate = std::get<6>(row);
    std::vector<T> a = random_values<T>(m * k, 7);
    for (Index i = 0; i < m; ++i)
        for (Index p = 0; p < k; ++p)
            if (p < i + band.k_first || p >= i + band.k_end) a[i * k + p] = T(0);
    const std::vector<T> bvals = random_values<T>(k * n, 8);
    std::vector<T> packs(static_cast<std::size_t>(detail::packed_size<T>(k, n)));
    const auto B = detail::pack_panels(bvals.data(), n, 1, k, n, packs.data());
    const std::vector<T> c0 = random_values<T>(m * n, 9);
    for (const bool vectorised : tiles_here()) {
        CAPTURE(m, n, k, band.cols, band.k_first, band.k_end, accumulate, vectorised);
        std::vector<T> c = c0;
        detail::packed_gemm<T>(m, n, k, T(0.5), a.data(), k, 1, B, 0, accumulate, c.data(), n,
                               vectorised, band);
        double worst = 0;
        Index needed = 0;
        for (Index i = 0; i < m; ++i)
            for (Index j = 0; j < n && j < i + band.cols; ++j, ++needed) {
                double sum = 0, size = 0;
                for (Index p = 0; p < k; ++p) {
                    const double t =
                        static_cast<double>(a[i * k + p]) * static_cast<double>(bvals[p * n + j]);
                    sum += t;
                    size += std::fabs(t);
                }
                const double base = accumulate ? static_cast<double>(c0[i * n + j]) : 0.0;
                const double got = static_cast<double>(c[i * n + j]);
                const double bound =
                    headwise::test::dot_tolerance<T>(k) * (std::fabs(base) + 0.5 * size + 1e-30);
                worst = std::max(worst, std::fabs(got - (base + 0.5 * sum)) / bound);
            }
        CAPTURE(worst, needed);
        CHECK(needed > 0);
        CHECK(worst <= 1.0);
    }
}

}  // namespace test_packed_panels
