// SPDX-License-Identifier: MIT
// check_model_record: what a model's backward asks of the record its forward_train returned.
#pragma once

#include <cstdint>    // std::uint64_t
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

namespace headwise::detail {

/// Throws std::invalid_argument naming `fn` and its argument fwd unless `saved` (a record's
/// activations, null after a forward in eval mode, which saves nothing) was made by the model
/// numbered `model` (InstanceId::value(); saved->model): another model's record (a copy is
/// another model) holds the activations of other parameters, whose gradients would be
/// silently wrong.
template <class Saved>
void check_model_record(const char* fn, const Saved* saved, std::uint64_t model) {
    if (saved == nullptr)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from a forward in eval mode, which saves "
                                    "nothing for backward; call train() before forward_train");
    if (saved->model != model)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from another model's forward_train (a copy of a "
                                    "model is another model); pass a result of this model's "
                                    "forward_train");
}

}  // namespace headwise::detail
