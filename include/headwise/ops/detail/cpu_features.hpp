// SPDX-License-Identifier: MIT
// Which x86 vector instruction set the running CPU offers, for kernels that pick theirs at run
// time.
#pragma once

// Run-time dispatch needs GCC or Clang on x86-64: their target attributes compile one function
// for an instruction set the rest of the program is not compiled for, and __builtin_cpu_supports
// asks the CPU. Elsewhere (other compilers, other CPUs) the portable code paths run.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HEADWISE_X86_DISPATCH 1
#else
#define HEADWISE_X86_DISPATCH 0
#endif

#if HEADWISE_X86_DISPATCH
#include <cpuid.h>  // __get_cpuid

/// Marks a function compiled for AVX-512 (F), whatever the translation unit's -march.
#define HEADWISE_TARGET_AVX512 __attribute__((target("avx512f")))
/// Marks a function compiled for AVX2 with FMA, whatever the translation unit's -march.
#define HEADWISE_TARGET_AVX2 __attribute__((target("avx2,fma")))
/// AVX2 with FMA and F16C (half <-> float conversions); run it where cpu_has_f16c() holds too.
#define HEADWISE_TARGET_AVX2_F16C __attribute__((target("avx2,fma,f16c")))
#endif

namespace headwise::detail {

/// The widest vector instruction set the dispatched kernels may use here.
enum class SimdLevel {
    none,    // the portable code (Eigen's, for the instruction set the build targets)
    avx2,    // AVX2 + FMA, 256-bit
    avx512,  // AVX-512 F, 512-bit
};

/// "none", "avx2" or "avx512".
constexpr const char* to_string(SimdLevel level) noexcept {
    return level == SimdLevel::avx512 ? "avx512" : level == SimdLevel::avx2 ? "avx2" : "none";
}

/// What this CPU runs: asked once and kept (a fact about the machine, not state a caller can
/// change). A build whose -march already includes AVX-512 answers avx512 without asking.
inline SimdLevel cpu_simd_level() noexcept {
#if HEADWISE_X86_DISPATCH
#if defined(__AVX512F__)
    return SimdLevel::avx512;
#else
    static const SimdLevel level = [] {
        __builtin_cpu_init();  // needed when this runs before the CPU model is initialised
        if (__builtin_cpu_supports("avx512f")) return SimdLevel::avx512;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::avx2;
        return SimdLevel::none;
    }();
    return level;
#endif
#else
    return SimdLevel::none;
#endif
}

/// Whether this CPU converts halves to floats in vector registers (F16C), asked once. Every
/// AVX2 CPU made so far has it, but it is a separate flag.
inline bool cpu_has_f16c() noexcept {
#if HEADWISE_X86_DISPATCH
    // CPUID leaf 1, ECX bit 29 (Clang's __builtin_cpu_supports does not know "f16c").
    static const bool has = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    }();
    return has;
#else
    return false;
#endif
}

}  // namespace headwise::detail
