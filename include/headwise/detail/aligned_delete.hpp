// SPDX-License-Identifier: MIT
// The deleter of a tensor's aligned allocation.
#pragma once

#include <new>  // ::operator delete, std::align_val_t

#include "../config.hpp"

namespace headwise::detail {

struct AlignedDelete {
    void operator()(void* p) const noexcept {
        ::operator delete (p, std::align_val_t{kTensorAlignment});
    }
};

}  // namespace headwise::detail
