// SPDX-License-Identifier: MIT
// Dropout<T>: torch.nn.Dropout with a seeded mask that backward regenerates instead of storing.
#pragma once

#include <algorithm>  // std::copy_n
#include <cstdint>    // std::uint64_t
#include <string>     // std::to_string

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../ops/dropout.hpp"
#include "../tensor.hpp"
#include "module.hpp"

namespace headwise {

/// What Dropout::forward returns and its backward consumes: the output and the stream that
/// drew its mask (no mask is stored: backward draws it again).
template <class T>
struct DropoutForward {
    Tensor<T> output;          // the input's shape
    std::uint64_t stream = 0;  // which stream of the module's seed drew the mask
    bool applied = false;      // false in eval mode or with p == 0: output is the input
};

/// Inverted dropout: in training mode every element is multiplied by 0 with probability p and
/// the others by 1 / (1 - p), so a dropped NaN or inf becomes NaN (ops::dropout_apply's rule, as
/// in torch), p == 1 included, forward and backward; in eval mode (or p == 0) the identity. The
/// mask of the k-th training forward is a pure function of (seed, k), so copies of a module draw
/// the same masks and there is no global generator. Any shape; no parameters.
template <class T>
class Dropout : public Module<Dropout<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::Dropout";

    /// Throws std::invalid_argument unless 0 <= p <= 1.
    explicit Dropout(double p = 0.5, std::uint64_t seed = 0);

    DropoutForward<T> forward(TensorView<const T> x);
    /// dx = dy ⊙ mask / (1 - p), the mask drawn again from fwd's stream.
    Tensor<T> backward(const DropoutForward<T>& fwd, TensorView<const T> dy) const;

    double p() const noexcept { return p_; }
    std::uint64_t seed() const noexcept { return seed_; }

    /// No parameters; the seed and the count of masks drawn (the next training forward's
    /// stream): what the next masks depend on (Module::random_state).
    template <class D>
    void declare(D& d) {
        d.random(seed_);
        d.random(next_stream_);
    }

private:
    void apply(std::uint64_t stream, TensorView<const T> x, TensorView<T> y) const;

    double p_;
    std::uint64_t seed_;
    std::uint64_t next_stream_ = 0;
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
Dropout<T>::Dropout(double p, std::uint64_t seed) : p_(p), seed_(seed) {
    if (!(p >= 0.0 && p <= 1.0))
        throw_invalid_argument("headwise::Dropout::Dropout", "p", "must be in [0, 1]",
                               std::to_string(p));
}

template <class T>
void Dropout<T>::apply(std::uint64_t stream, TensorView<const T> x, TensorView<T> y) const {
    if (x.numel() == 0) return;
    // p = 1 goes through the kernel too: its threshold 2^32 exceeds every 32-bit draw, so every
    // entry is multiplied by 0 (the infinite 1 / (1 - p) is never used) and a NaN or inf entry
    // becomes NaN by the kernel's rule, not 0.
    const Shape row{1, x.numel()};
    ops::dropout_apply(ops::Dropout{p_, seed_}, stream, x.reshape(row).matrix(),
                       y.reshape(row).matrix());
}

template <class T>
DropoutForward<T> Dropout<T>::forward(TensorView<const T> x) {
    DropoutForward<T> f;
    f.output = Tensor<T>::uninitialized(x.shape());  // [...]
    f.applied = this->is_training() && p_ > 0.0;
    if (!f.applied) {
        std::copy_n(x.data(), x.numel(), f.output.data());
        return f;
    }
    f.stream = next_stream_++;
    apply(f.stream, x, f.output);
    return f;
}

template <class T>
Tensor<T> Dropout<T>::backward(const DropoutForward<T>& fwd, TensorView<const T> dy) const {
    detail::check_shape("headwise::Dropout::backward", "grad_output", dy.shape(),
                        fwd.output.shape());
    Tensor<T> dx = Tensor<T>::uninitialized(dy.shape());  // [...]
    if (!fwd.applied)
        std::copy_n(dy.data(), dy.numel(), dx.data());
    else
        apply(fwd.stream, dy, dx);  // d(x ⊙ m / (1 - p)) / dx = m / (1 - p): the same map
    return dx;
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_DROPOUT_TEMPLATES(C, F, T) \
    C(class, Dropout<T>)                           \
    C(struct, DropoutForward<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_DROPOUT_TEMPLATES);
