// SPDX-License-Identifier: MIT
// Workspace: scratch buffers a module reuses from call to call, so steady state allocates nothing.
#pragma once

#include <cstring>  // std::memset
#include <vector>   // std::vector

#include "../config.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise::detail {

/// Numbered scratch buffers that only grow. A buffer handed out by get() stays valid until the
/// same slot is asked for again; nothing handed out may escape the call that asked for it.
/// Fresh allocations of tens of megabytes cost page faults on every call (the allocator returns
/// them to the system); reusing them costs nothing. Copying a module does not copy its scratch.
template <class T>
class Workspace {
public:
    Workspace() = default;
    Workspace(const Workspace&) noexcept {}
    Workspace& operator=(const Workspace&) noexcept { return *this; }
    Workspace(Workspace&&) noexcept = default;
    Workspace& operator=(Workspace&&) noexcept = default;
    ~Workspace() = default;

    /// A contiguous buffer of `shape` in slot `slot`, zero-filled when `zero` is true, else with
    /// unspecified contents.
    TensorView<T> get(std::size_t slot, const Shape& shape, bool zero) {
        if (slot >= slots_.size()) slots_.resize(slot + 1);
        Tensor<T>& t = slots_[slot];
        if (t.numel() < shape.numel()) t = Tensor<T>(Shape{shape.numel()});
        if (zero && shape.numel() > 0)
            std::memset(static_cast<void*>(t.data()), 0,
                        static_cast<std::size_t>(shape.numel()) * sizeof(T));
        return TensorView<T>(t.data(), shape);
    }

    /// Frees every buffer.
    void release() noexcept { slots_.clear(); }

    /// Bytes held.
    std::size_t bytes() const noexcept {
        std::size_t n = 0;
        for (const Tensor<T>& t : slots_) n += static_cast<std::size_t>(t.numel()) * sizeof(T);
        return n;
    }

private:
    std::vector<Tensor<T>> slots_;
};

}  // namespace headwise::detail
