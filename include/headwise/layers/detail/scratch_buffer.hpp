// SPDX-License-Identifier: MIT
// ScratchBuffer: memory a module reuses from call to call, so that steady state allocates nothing.
#pragma once

#include <cstddef>  // std::size_t
#include <cstring>  // std::memset

#include "../../config.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"

namespace headwise::detail {

/// One flat buffer that only grows. A view handed out by get() or zeros() stays valid until the
/// buffer is asked for a larger shape. Fresh allocations of tens of megabytes cost page faults on
/// every call (the allocator returns them to the system); reusing them costs nothing. A copy
/// starts empty: scratch is never shared, so copies of a module may run at the same time.
template <class T>
class ScratchBuffer {
public:
    ScratchBuffer() = default;
    ScratchBuffer(const ScratchBuffer&) noexcept {}
    ScratchBuffer& operator=(const ScratchBuffer&) noexcept { return *this; }
    ScratchBuffer(ScratchBuffer&&) noexcept = default;
    ScratchBuffer& operator=(ScratchBuffer&&) noexcept = default;
    ~ScratchBuffer() = default;

    /// The buffer viewed as `shape`, grown if needed; contents unspecified.
    TensorView<T> get(const Shape& shape) {
        if (t_.numel() < shape.numel()) t_ = Tensor<T>::uninitialized(Shape{shape.numel()});
        return TensorView<T>(t_.data(), shape);
    }
    /// The buffer viewed as `shape`, grown if needed, every element zero.
    TensorView<T> zeros(const Shape& shape) {
        TensorView<T> v = get(shape);
        if (!v.empty())
            std::memset(static_cast<void*>(v.data()), 0,
                        sizeof(T) * static_cast<std::size_t>(v.numel()));
        return v;
    }
    /// Start of the buffer (null before the first get()).
    T* data() noexcept { return t_.data(); }

private:
    Tensor<T> t_;
};

}  // namespace headwise::detail
