// SPDX-License-Identifier: MIT
// Tensor<T> (owning, aligned, contiguous row-major) and TensorView<T> (non-owning), with Eigen
// maps.
#pragma once

#include <Eigen/Core>

#include <algorithm>    // std::fill_n, std::copy_n
#include <cstdint>      // std::int64_t
#include <cstring>      // std::memset
#include <memory>       // std::unique_ptr
#include <new>          // ::operator new, std::align_val_t
#include <ostream>      // std::ostream
#include <stdexcept>    // std::length_error, std::out_of_range
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::remove_const_t, std::enable_if_t
#include <utility>      // std::move
#include <vector>       // std::vector

#include "config.hpp"
#include "detail/aligned_delete.hpp"
#include "detail/tensor_index.hpp"
#include "detail/tensor_print.hpp"
#include "error.hpp"
#include "random.hpp"
#include "shape.hpp"

namespace headwise {

/// Row-major dynamic Eigen matrix: the layout of every tensor's [rows x last-dim] matrix.
template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Map of a contiguous row-major matrix (const-qualified for `const T`).
template <class T>
using MatrixMap =
    Eigen::Map<std::conditional_t<std::is_const_v<T>, const RowMatrix<std::remove_const_t<T>>,
                                  RowMatrix<std::remove_const_t<T>>>>;

/// Map of a row-major matrix whose rows are `stride` elements apart, e.g. head h's [rows, D]
/// column block of a [rows, E] matrix.
template <class T>
using StridedMatrixMap =
    Eigen::Map<std::conditional_t<std::is_const_v<T>, const RowMatrix<std::remove_const_t<T>>,
                                  RowMatrix<std::remove_const_t<T>>>,
               Eigen::Unaligned, Eigen::OuterStride<>>;

/// Read-only row-major matrix argument of a kernel: binds without a copy to a MatrixMap, a
/// StridedMatrixMap (column block) or a RowMatrix. Any other expression is evaluated into a
/// temporary first, which is correct but slow.
template <class T>
using ConstMatrixRef = Eigen::Ref<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

/// Writable row-major matrix argument of a kernel: a MatrixMap, a StridedMatrixMap or a RowMatrix
/// (rows contiguous, any row stride); anything else does not compile.
template <class T>
using MatrixRef = Eigen::Ref<RowMatrix<T>, 0, Eigen::OuterStride<>>;

template <class T>
class Tensor;

/// Non-owning view of contiguous row-major memory: a pointer and a shape. Cheap to copy; the
/// memory must outlive the view. `TensorView<const T>` is the read-only flavour every function
/// takes as input, and converts implicitly from `Tensor<T>` and `TensorView<T>`.
template <class T>
class TensorView {
public:
    using value_type = std::remove_const_t<T>;

    TensorView() = default;
    /// Throws std::length_error when the shape's element count overflows Index.
    TensorView(T* data, const Shape& shape) : data_(data), shape_(shape) {
        static_cast<void>(shape_.numel());  // validates once, so numel() below cannot throw
    }
    /// A view of mutable memory converts to a read-only view.
    template <class U,
              class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
    TensorView(TensorView<U> other) noexcept : data_(other.data()), shape_(other.shape()) {}
    /// Views of an owning tensor (implicit, as for std::string_view).
    template <class U, class = std::enable_if_t<std::is_same_v<std::remove_const_t<T>, U> &&
                                                std::is_const_v<T>>>
    TensorView(const Tensor<U>& t) noexcept : data_(t.data()), shape_(t.shape()) {}
    template <class U, class = std::enable_if_t<std::is_same_v<T, U>>>
    TensorView(Tensor<U>& t) noexcept : data_(t.data()), shape_(t.shape()) {}

    T* data() const noexcept { return data_; }
    const Shape& shape() const noexcept { return shape_; }
    int rank() const noexcept { return shape_.rank(); }
    Index numel() const noexcept { return shape_.numel(); }
    Index size(int axis) const noexcept { return shape_[shape_.normalize_axis(axis)]; }
    bool empty() const noexcept { return numel() == 0; }
    T* begin() const noexcept { return data_; }
    T* end() const noexcept { return data_ + numel(); }

    /// Unchecked element access, one index per axis, for inner loops: an index out of range is
    /// undefined behaviour under NDEBUG (as std::vector::operator[]); debug builds stop with a
    /// message naming the index and the shape. at() is the checked form.
    template <class... I, class = std::enable_if_t<detail::all_integral_v<I...>>>
    T& operator()(I... idx) const {
        return data_[detail::offset_of("headwise::TensorView::operator()", shape_, idx...)];
    }
    /// Checked element access, in every build (as std::vector::at): throws std::out_of_range
    /// naming the index and the shape ("headwise::TensorView::at: index 5 of dimension 1 is out
    /// of range for shape [2, 3]"), or the count of indices and the rank when they differ.
    template <class... I, class = std::enable_if_t<detail::all_integral_v<I...>>>
    T& at(I... idx) const {
        return data_[detail::checked_offset_of("headwise::TensorView::at", shape_, idx...)];
    }
    T& operator[](Index flat) const {
        HEADWISE_ASSERT(flat >= 0 && flat < numel());
        return data_[flat];
    }

    /// The same memory under another shape with the same number of elements.
    TensorView reshape(const Shape& shape) const {
        if (shape.numel() != numel())
            throw shape_error("headwise::TensorView::reshape", "shape",
                              "with " + std::to_string(numel()) + " elements", shape);
        return TensorView(data_, shape);
    }
    /// Entry `i` of the leading axis: shape [d0, d1, ...] -> [d1, ...].
    TensorView slice(Index i) const {
        if (rank() < 1 || i < 0 || i >= shape_[0])
            throw std::out_of_range("headwise::TensorView::slice: index " + std::to_string(i) +
                                    " out of range for shape " + shape_.str());
        Shape s = shape_.drop_front();
        return TensorView(data_ + i * s.numel(), s);
    }
    /// Entries [start, start + count) of the leading axis, rank kept.
    TensorView narrow(Index start, Index count) const {
        if (rank() < 1 || start < 0 || count < 0 || start + count > shape_[0])
            throw std::out_of_range("headwise::TensorView::narrow: range [" +
                                    std::to_string(start) + ", " + std::to_string(start + count) +
                                    ") out of range for shape " + shape_.str());
        Shape s = shape_;
        s[0] = count;
        return TensorView(data_ + start * (numel() / (shape_[0] == 0 ? 1 : shape_[0])), s);
    }

    /// The [numel / last, last] row-major matrix over the same memory (no copy).
    MatrixMap<T> matrix() const {
        return MatrixMap<T>(data_, leading_rows(), rank() == 0 ? 1 : shape_.back());
    }
    /// Columns [first, first + count) of matrix(), strided, no copy: head h of a [rows, E]
    /// projection is `column_block(h * D, D)`.
    StridedMatrixMap<T> column_block(Index first, Index count) const {
        HEADWISE_ASSERT(first >= 0 && count >= 0 && first + count <= shape_.back());
        return StridedMatrixMap<T>(data_ + first, leading_rows(), count,
                                   Eigen::OuterStride<>(shape_.back()));
    }
    /// Product of every extent but the last: the rows of matrix().
    Index leading_rows() const noexcept {
        Index rows = 1;
        for (int a = 0; a + 1 < rank(); ++a) rows *= shape_[a];
        return rows;
    }

    friend std::ostream& operator<<(std::ostream& os, const TensorView& v) {
        detail::print_tensor(os, v.data(), v.shape());
        return os;
    }

private:
    T* data_ = nullptr;
    Shape shape_{0};
};

/// Wraps user memory (a std::vector, an Eigen matrix, another framework's buffer) without copying.
template <class T>
TensorView<T> view(T* data, const Shape& shape) {
    return TensorView<T>(data, shape);
}

/// Owning, zero-initialised, 64-byte aligned, contiguous row-major tensor of any rank up to
/// Shape::kMaxRank. Holds float or double (computation), bool (masks) or std::int64_t (indices:
/// token ids, class targets). A default-constructed
/// tensor is empty: shape [0], numel() == 0.
template <class T>
class Tensor {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, bool> || std::is_same_v<T, std::int64_t>,
                  "headwise::Tensor holds float, double (values), bool (masks) or std::int64_t "
                  "(indices)");

public:
    using value_type = T;

    Tensor() = default;
    /// Throws std::length_error naming the shape when its element count or byte size overflows.
    explicit Tensor(const Shape& shape) : shape_(shape), data_(allocate(shape)) {
        if (numel() > 0) std::memset(static_cast<void*>(data_.get()), 0, bytes());
    }
    /// Copies `values` (row-major); throws shape_error when their count differs from numel().
    Tensor(const Shape& shape, const std::vector<T>& values) : Tensor(shape) {
        if (static_cast<Index>(values.size()) != shape.numel())
            throw shape_error("headwise::Tensor::Tensor", "values",
                              std::to_string(shape.numel()) + " values for shape " + shape.str(),
                              Shape{static_cast<Index>(values.size())});
        std::copy(values.begin(), values.end(), data_.get());
    }
    /// Deep copy of a view.
    explicit Tensor(TensorView<const T> v) : shape_(v.shape()), data_(allocate(v.shape())) {
        std::copy_n(v.data(), v.numel(), data_.get());
    }

    Tensor(const Tensor& other) : Tensor(TensorView<const T>(other)) {}
    Tensor(Tensor&& other) noexcept
        : shape_(std::exchange(other.shape_, Shape{0})), data_(std::move(other.data_)) {}
    Tensor& operator=(const Tensor& other) {
        if (this != &other) *this = Tensor(other);
        return *this;
    }
    Tensor& operator=(Tensor&& other) noexcept {
        shape_ = std::exchange(other.shape_, Shape{0});
        data_ = std::move(other.data_);
        return *this;
    }
    ~Tensor() = default;

    // ---- factories ------------------------------------------------------------------------
    static Tensor zeros(const Shape& shape) { return Tensor(shape); }
    /// A tensor whose elements are left unspecified, for a result about to be overwritten in
    /// full: it saves the zero-filling pass over memory that the constructor makes.
    static Tensor uninitialized(const Shape& shape) {
        Tensor t;
        t.shape_ = shape;
        t.data_ = allocate(shape);
        return t;
    }
    static Tensor ones(const Shape& shape) { return full(shape, T(1)); }
    static Tensor full(const Shape& shape, T value) {
        Tensor t(shape);
        std::fill_n(t.data(), t.numel(), value);
        return t;
    }
    /// [0, 1, ..., n-1] as a rank-1 tensor.
    static Tensor arange(Index n) {
        static_assert(!std::is_same_v<T, bool>, "headwise::Tensor<bool>::arange is meaningless");
        Tensor t(Shape{n});
        for (Index i = 0; i < n; ++i) t.data()[i] = static_cast<T>(i);
        return t;
    }
    /// Standard normal entries drawn from `rng` (std::mt19937_64 or any 64-bit engine).
    template <class Rng>
    static Tensor randn(const Shape& shape, Rng& rng) {
        HEADWISE_STATIC_ASSERT_REAL(T);
        Tensor t(shape);
        for (Index i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<T>(normal(rng));
        return t;
    }
    /// Uniform entries in [lo, hi) drawn from `rng`.
    template <class Rng>
    static Tensor uniform(const Shape& shape, double lo, double hi, Rng& rng) {
        HEADWISE_STATIC_ASSERT_REAL(T);
        Tensor t(shape);
        for (Index i = 0; i < t.numel(); ++i)
            t.data()[i] = static_cast<T>(headwise::uniform_scalar(rng, lo, hi));
        return t;
    }

    // ---- observers -----------------------------------------------------------------------
    const Shape& shape() const noexcept { return shape_; }
    int rank() const noexcept { return shape_.rank(); }
    Index numel() const noexcept { return shape_.numel(); }
    Index size(int axis) const noexcept { return shape_[shape_.normalize_axis(axis)]; }
    bool empty() const noexcept { return numel() == 0; }
    T* data() noexcept { return data_.get(); }
    const T* data() const noexcept { return data_.get(); }
    T* begin() noexcept { return data(); }
    T* end() noexcept { return data() + numel(); }
    const T* begin() const noexcept { return data(); }
    const T* end() const noexcept { return data() + numel(); }

    /// Unchecked element access, one index per axis, for inner loops: an index out of range is
    /// undefined behaviour under NDEBUG (as std::vector::operator[]); debug builds stop with a
    /// message naming the index and the shape. at() is the checked form.
    template <class... I, class = std::enable_if_t<detail::all_integral_v<I...>>>
    T& operator()(I... idx) {
        return data_[static_cast<std::size_t>(
            detail::offset_of("headwise::Tensor::operator()", shape_, idx...))];
    }
    template <class... I, class = std::enable_if_t<detail::all_integral_v<I...>>>
    const T& operator()(I... idx) const {
        return data_[static_cast<std::size_t>(
            detail::offset_of("headwise::Tensor::operator()", shape_, idx...))];
    }
    /// Checked element access, in every build (as std::vector::at): throws std::out_of_range
    /// naming the index and the shape ("headwise::Tensor::at: index 5 of dimension 1 is out of
    /// range for shape [2, 3]"), or the count of indices and the rank when they differ.
    template <class... I, class = std::enable_if_t<detail::all_integral_v<I...>>>
    T& at(I... idx) {
        return data_[static_cast<std::size_t>(
            detail::checked_offset_of("headwise::Tensor::at", shape_, idx...))];
    }
    template <class... I, class = std::enable_if_t<detail::all_integral_v<I...>>>
    const T& at(I... idx) const {
        return data_[static_cast<std::size_t>(
            detail::checked_offset_of("headwise::Tensor::at", shape_, idx...))];
    }

    // ---- views ---------------------------------------------------------------------------
    TensorView<T> view() noexcept { return TensorView<T>(data(), shape_); }
    TensorView<const T> view() const noexcept { return TensorView<const T>(data(), shape_); }

    /// Same elements under another shape with equal numel. On an lvalue this is a view (no
    /// copy); on an rvalue the tensor itself is moved into the result (no copy, no dangling).
    TensorView<T> reshape(const Shape& shape) & { return view().reshape(shape); }
    TensorView<const T> reshape(const Shape& shape) const& { return view().reshape(shape); }
    Tensor reshape(const Shape& shape) && {
        view().reshape(shape);  // validates
        Tensor t(std::move(*this));
        t.shape_ = shape;
        return t;
    }
    TensorView<T> slice(Index i) { return view().slice(i); }
    TensorView<const T> slice(Index i) const { return view().slice(i); }
    TensorView<T> narrow(Index start, Index count) { return view().narrow(start, count); }
    TensorView<const T> narrow(Index start, Index count) const {
        return view().narrow(start, count);
    }

    MatrixMap<T> matrix() { return view().matrix(); }
    MatrixMap<const T> matrix() const { return view().matrix(); }
    StridedMatrixMap<T> column_block(Index first, Index count) {
        return view().column_block(first, count);
    }
    StridedMatrixMap<const T> column_block(Index first, Index count) const {
        return view().column_block(first, count);
    }

    /// Sets every element to `value`.
    Tensor& fill(T value) {
        std::fill_n(data(), numel(), value);
        return *this;
    }

    friend std::ostream& operator<<(std::ostream& os, const Tensor& t) {
        detail::print_tensor(os, t.data(), t.shape());
        return os;
    }

private:
    /// Storage for `shape`. The byte count is computed with an overflow check and must fit in
    /// Index too (so that any pointer difference within the buffer does).
    static std::unique_ptr<T[], detail::AlignedDelete> allocate(const Shape& shape) {
        const Index n = shape.numel();  // throws when the element count overflows
        if (n == 0) return nullptr;
        Index bytes = 0;
        if (__builtin_mul_overflow(n, static_cast<Index>(sizeof(T)), &bytes))
            throw std::length_error(
                "headwise::Tensor::Tensor: shape " + shape.str() + ": " + std::to_string(n) +
                " elements of " + std::to_string(sizeof(T)) + " bytes overflow the address space");
        void* p =
            ::operator new (static_cast<std::size_t>(bytes), std::align_val_t{kTensorAlignment});
        return std::unique_ptr<T[], detail::AlignedDelete>(static_cast<T*>(p));
    }
    std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * sizeof(T); }

    Shape shape_{0};
    std::unique_ptr<T[], detail::AlignedDelete> data_;
};

}  // namespace headwise
