// SPDX-License-Identifier: MIT
// Counts the heap allocations of a test program by replacing every form of the global operator
// new and operator delete (plain, array, aligned, nothrow). Include it in exactly one translation
// unit of a test program: the replacements are definitions, and a program has one of each.
//
// All twelve allocation forms are replaced, the nothrow ones included: a form left out would still
// come from the runtime's operator new, and under AddressSanitizer its memory, freed here with
// std::free, is an alloc-dealloc mismatch. The replacements are kept out of line: inlined at a
// call site, GCC 12 sees std::free applied to what operator new returned and warns
// (-Wmismatched-new-delete), although the two are a matched pair here.
#pragma once

#include <atomic>   // std::atomic
#include <cstddef>  // std::size_t, std::max_align_t
#include <cstdlib>  // std::malloc, std::aligned_alloc, std::free
#include <new>      // std::bad_alloc, std::align_val_t, std::nothrow_t

namespace headwise::test {
namespace counting {

inline std::atomic<long> allocation_count{0};

/// n bytes aligned to align, or nullptr; counted either way (a failed request is still a request).
inline void* counted_allocation(std::size_t n, std::size_t align) noexcept {
    ++allocation_count;
    if (align <= alignof(std::max_align_t)) return std::malloc(n ? n : 1);
    const std::size_t bytes = (n + align - 1) / align * align;  // aligned_alloc wants a multiple
    return std::aligned_alloc(align, bytes ? bytes : align);
}

inline void* counted_or_throw(std::size_t n, std::size_t align) {
    if (void* p = counted_allocation(n, align)) return p;
    throw std::bad_alloc();
}

}  // namespace counting

/// Allocations made so far by the program.
inline long allocations() { return counting::allocation_count.load(); }

/// Allocations made by f().
template <class F>
long count_allocations(F&& f) {
    const long before = allocations();
    f();
    return allocations() - before;
}

}  // namespace headwise::test

// ---- the replacements --------------------------------------------------------------------------
constexpr std::size_t kDefaultNewAlignment = alignof(std::max_align_t);

[[gnu::noinline]] void* operator new(std::size_t n) {
    return headwise::test::counting::counted_or_throw(n, kDefaultNewAlignment);
}
[[gnu::noinline]] void* operator new[](std::size_t n) {
    return headwise::test::counting::counted_or_throw(n, kDefaultNewAlignment);
}
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a) {
    return headwise::test::counting::counted_or_throw(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a) {
    return headwise::test::counting::counted_or_throw(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return headwise::test::counting::counted_allocation(n, kDefaultNewAlignment);
}
[[gnu::noinline]] void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return headwise::test::counting::counted_allocation(n, kDefaultNewAlignment);
}
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a,
                                     const std::nothrow_t&) noexcept {
    return headwise::test::counting::counted_allocation(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a,
                                       const std::nothrow_t&) noexcept {
    return headwise::test::counting::counted_allocation(n, static_cast<std::size_t>(a));
}

[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
[[gnu::noinline]] void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
    std::free(p);
}
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t,
                                         const std::nothrow_t&) noexcept {
    std::free(p);
}
