// SPDX-License-Identifier: MIT
// Tests of headwise/ops/detail/softmax_rows.hpp: every instruction set this CPU runs (AVX-512,
// AVX2, the portable Eigen code) against std::exp in double, the masking and NaN rules, every tail
// length, in place.
#include <headwise/ops/detail/softmax_rows.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::exp, std::fabs, std::isnan, std::log
#include <cstdint>    // std::uint64_t
#include <limits>     // std::numeric_limits
#include <random>     // std::mt19937_64, std::uniform_real_distribution
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"

namespace test_softmax_rows {

using headwise::Index;
namespace detail = headwise::detail;
using detail::SimdLevel;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// One implementation of the two row kernels in float.
struct Kernels {
    std::string name;
    float (*max)(const float*, Index);
    float (*exp_sum)(const float*, float, float*, Index);
};

/// The portable kernels, the dispatched ones, and each instruction set this CPU runs.
std::vector<Kernels> kernels_here() {
    std::vector<Kernels> k = {
        {"portable", detail::portable_row_max<float>, detail::portable_exp_shifted_sum<float>},
        {"dispatched", detail::row_max<float>, detail::exp_shifted_sum<float>}};
#if HEADWISE_X86_DISPATCH
    const SimdLevel level = detail::cpu_simd_level();
    if (level == SimdLevel::avx512)
        k.push_back({"avx512", detail::simd::row_max_avx512, detail::simd::exp_shifted_sum_avx512});
    // Every CPU with AVX-512 F also has AVX2 and FMA.
    if (level == SimdLevel::avx512 || level == SimdLevel::avx2)
        k.push_back({"avx2", detail::simd::row_max_avx2, detail::simd::exp_shifted_sum_avx2});
#endif
    return k;
}

/// exp(x - shift) as the kernels define it, in double: the difference rounded to float (the
/// kernels subtract in float), 0 below log(smallest normal float).
double reference_exp(float x, float shift) {
    const double z = static_cast<double>(x - shift);
    if (std::isnan(z)) return z;
    return z < std::log(static_cast<double>(std::numeric_limits<float>::min())) ? 0.0 : std::exp(z);
}

}  // namespace

TEST_CASE("exp_shifted_sum matches exp in double to 2 float ulps over the whole range",
          "[softmax_rows]") {
    // Every float z in [log(FLT_MIN), 0] is reachable as x - shift; a dense sweep with a few
    // shifts covers the range reduction's every k and both ends.
    std::vector<float> x, y;
    for (double z = -87.33; z <= 0.0; z += 1.0 / 4096) x.push_back(static_cast<float>(z));
    x.push_back(0.0f);
    y.resize(x.size());
    for (const Kernels& k : kernels_here()) {
        for (const float shift : {0.0f, 3.5f, -20.25f}) {
            std::vector<float> shifted(x.size());
            for (std::size_t j = 0; j < x.size(); ++j) shifted[j] = x[j] + shift;
            const float sum = k.exp_sum(shifted.data(), shift, y.data(), Index(x.size()));
            double worst = 0.0, reference_sum = 0.0;
            for (std::size_t j = 0; j < x.size(); ++j) {
                const double want = reference_exp(shifted[j], shift);
                reference_sum += want;
                if (want == 0.0) {
                    CHECK(y[j] == 0.0f);
                    continue;
                }
                worst = std::max(worst, std::fabs(y[j] - want) / want);
            }
            CAPTURE(k.name, shift, worst);
            CHECK(worst <= 2.0 * std::numeric_limits<float>::epsilon());  // 2 ulp
            CHECK(std::fabs(sum - reference_sum) <= 1e-6 * reference_sum);
        }
    }
}

TEST_CASE("exp_shifted_sum: masked entries are exactly 0, NaN stays NaN, every tail length",
          "[softmax_rows]") {
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<float> score(-30.0f, 30.0f);
    for (const Kernels& k : kernels_here()) {
        for (Index n = 1; n <= 41; ++n) {
            std::vector<float> x(static_cast<std::size_t>(n));
            for (float& v : x) v = score(rng);
            x[static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(n))] = -kInf;  // masked
            x[static_cast<std::size_t>(n - 1)] = -200.0f;  // far below the smallest normal
            const float shift = 31.0f;
            std::vector<float> y(x.size() + 1, 7.0f);  // one guard element past the row
            const float sum = k.exp_sum(x.data(), shift, y.data(), n);
            double reference_sum = 0.0;
            for (Index j = 0; j < n; ++j) {
                const double want = reference_exp(x[std::size_t(j)], shift);
                reference_sum += want;
                CAPTURE(k.name, n, j, x[std::size_t(j)]);
                if (want == 0.0)
                    CHECK(y[std::size_t(j)] == 0.0f);
                else
                    CHECK(std::fabs(y[std::size_t(j)] - want) <= 2.5e-7 * want);
            }
            CHECK(y.back() == 7.0f);  // nothing written past n
            CHECK(std::fabs(sum - reference_sum) <= 1e-6 * reference_sum + 1e-30);

            // In place, with a NaN at each position in turn: that entry and the sum are NaN,
            // the others as before.
            for (Index at = 0; at < n; ++at) {
                std::vector<float> z = x;
                z[std::size_t(at)] = kNaN;
                const float s = k.exp_sum(z.data(), shift, z.data(), n);
                CAPTURE(k.name, n, at);
                CHECK(std::isnan(s));
                CHECK(std::isnan(z[std::size_t(at)]));
                for (Index j = 0; j < n; ++j)
                    if (j != at) CHECK(z[std::size_t(j)] == y[std::size_t(j)]);
            }
        }
    }
}

TEST_CASE("exp_shifted_sum gives 0 and infinity at the ends of float's range", "[softmax_rows]") {
    const float x[] = {-kInf, -1e30f, -104.5f, -87.4f, 88.0f, 89.5f, 1e30f, kInf};
    for (const Kernels& k : kernels_here()) {
        float y[8];
        k.exp_sum(x, 0.0f, y, 8);
        CAPTURE(k.name);
        for (int j = 0; j < 4; ++j) CHECK(y[j] == 0.0f);
        CHECK(std::fabs(y[4] - std::exp(88.0)) <= 2.5e-7 * std::exp(88.0));
        for (int j = 5; j < 8; ++j) CHECK(y[j] == kInf);
    }
}

TEST_CASE("row_max is NaN when any entry is, the maximum otherwise, every tail length",
          "[softmax_rows]") {
    std::mt19937_64 rng(12);
    std::uniform_real_distribution<float> score(-5.0f, 5.0f);
    for (const Kernels& k : kernels_here()) {
        for (Index n = 1; n <= 41; ++n) {
            std::vector<float> x(static_cast<std::size_t>(n) + 1);
            for (float& v : x) v = score(rng);
            x.back() = 1e9f;  // past the row: never read as part of it
            float want = -kInf;
            for (Index j = 0; j < n; ++j) want = std::max(want, x[std::size_t(j)]);
            CAPTURE(k.name, n);
            CHECK(k.max(x.data(), n) == want);
            for (Index at = 0; at < n; ++at) {
                std::vector<float> z = x;
                z[std::size_t(at)] = kNaN;
                CAPTURE(at);
                CHECK(std::isnan(k.max(z.data(), n)));
            }
            std::vector<float> masked(static_cast<std::size_t>(n), -kInf);
            CHECK(k.max(masked.data(), n) == -kInf);
        }
    }
}

TEST_CASE("the double kernels follow the same rules to double precision", "[softmax_rows]") {
    const double lowest = std::log(std::numeric_limits<double>::min());
    std::vector<double> x = {
        0.0, -1.0, -700.0, lowest - 1.0, -std::numeric_limits<double>::infinity(), -0.5, -3.25};
    std::vector<double> y(x.size());
    const double sum = detail::exp_shifted_sum(x.data(), 0.0, y.data(), Index(x.size()));
    double reference_sum = 0.0;
    for (std::size_t j = 0; j < x.size(); ++j) {
        const double want = x[j] < lowest ? 0.0 : std::exp(x[j]);
        reference_sum += want;
        CAPTURE(j);
        if (want == 0.0)
            CHECK(y[j] == 0.0);
        else
            CHECK(std::fabs(y[j] - want) <= 4e-16 * want);
    }
    CHECK(std::fabs(sum - reference_sum) <= 4e-16 * reference_sum);
    CHECK(detail::row_max(x.data(), Index(x.size())) == 0.0);
    x[3] = std::numeric_limits<double>::quiet_NaN();
    CHECK(std::isnan(detail::row_max(x.data(), Index(x.size()))));
}

TEST_CASE("the dispatched kernels run the widest instruction set this CPU has", "[softmax_rows]") {
    const SimdLevel level = detail::softmax_rows_level();
    INFO("softmax rows run " << detail::to_string(level));
#if HEADWISE_X86_DISPATCH
    CHECK(level == (__builtin_cpu_supports("avx512f") ? SimdLevel::avx512
                    : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                        ? SimdLevel::avx2
                        : SimdLevel::none));
#else
    CHECK(level == SimdLevel::none);
#endif
}

}  // namespace test_softmax_rows
