// SPDX-License-Identifier: MIT
// WeightMatrix<T>: a weight matrix, its gradient and the format its products read it in.
#pragma once

#include <algorithm>    // std::copy_n
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t, std::uint64_t
#include <memory>       // std::shared_ptr, std::make_shared
#include <mutex>        // std::mutex, std::lock_guard
#include <stdexcept>    // std::logic_error
#include <string>       // std::string
#include <type_traits>  // std::is_same_v
#include <utility>      // std::move
#include <vector>       // std::vector

#include "../bf16.hpp"
#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../ops/gemm_bf16.hpp"
#include "../ops/linear.hpp"
#include "../ops/prepared_gemm.hpp"
#include "../ops/quant_matmul.hpp"
#include "../precision.hpp"
#include "../quant/dequantize.hpp"
#include "../quant/quantize.hpp"
#include "../quant/types.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise {

/// The holder of one weight matrix that a module multiplies by (Linear's weight,
/// MultiheadAttention's in- and out-projection weights): the float master weight, its gradient,
/// and the copy in the format the products read (Precision::bf16: a bf16 copy). Every module
/// that multiplies by weights keeps them in these, so that a format is implemented here once:
/// the module contract (layers/module.hpp) switches every holder of a module tree
/// (with_precision), counts their bytes (memory_bytes) and refreshes their copies (eval(),
/// load_state_dict()), and the products below dispatch on the format in one place.
///
/// States: float32 (master only); bf16 keep (master + copy; the copy is taken by
/// set_precision, on every switch to evaluation mode and after every write through the module
/// contract: refresh()); bf16 released (the copy only: master and gradient freed, shape()
/// still the logical one); stored (a GGUF tensor type: the rows as quantized blocks, quantized
/// once from the master by set_stored, or a file's blocks as they are by take_stored; the master
/// kept or released; inference only). Independently of these, a float32 weight may be prepared
/// (set_prepared): the master kept, plus a copy in the layout of the kernel that multiplies it
/// (ops::PreparedMatrix: oneDNN's matmul with the weight reordered once), which evaluation-mode
/// products read. The logical shape may be any rank (MultiheadAttention's
/// in-projection is one flat block that its declaration views as one or three matrices): the
/// products see it as rows of row_length() values.
template <class T>
class WeightMatrix {
public:
    WeightMatrix() = default;
    /// A zero weight of `shape` and a zero gradient; rows of shape's last extent.
    explicit WeightMatrix(const Shape& shape)
        : shape_(shape), row_length_(shape.back()), value_(shape), grad_(shape) {}
    /// A weight of `shape` left unwritten (a loader fills it) and the gradient allocated on
    /// first use (grad()).
    static WeightMatrix uninitialized(const Shape& shape) {
        WeightMatrix w;
        w.shape_ = shape;
        w.row_length_ = shape.back();
        w.value_ = Tensor<T>::uninitialized(shape);
        w.grad_ = Tensor<T>(Shape{0});
        return w;
    }

    /// The logical shape (also after a release).
    const Shape& shape() const noexcept { return shape_; }
    Index numel() const noexcept { return shape_.numel(); }
    Precision precision() const noexcept { return precision_; }
    /// Whether the float master and its gradient were freed (bf16 or stored, release).
    bool released() const noexcept { return released_; }
    /// Values per row as the products read the weight (the last extent unless set otherwise);
    /// 0 when the rows differ in length (no stored format then).
    Index row_length() const noexcept { return row_length_; }
    void set_row_length(Index n) noexcept { row_length_ = n; }
    /// The stored type (a GGUF tensor type), or quant::Type::f32 when the products read float or
    /// bf16 (precision()).
    quant::Type stored_type() const noexcept { return stored_; }
    bool stored() const noexcept { return stored_ != quant::Type::f32; }
    /// Throws std::logic_error naming `function` when the weight is stored in a GGUF type
    /// (training needs float weights); the release check is the caller's. Allocates nothing
    /// otherwise (backward calls it on every step).
    void check_trainable(const char* function) const {
        if (stored())
            throw std::logic_error(
                std::string(function) + ": the weight is stored as " +
                quant::block_format(stored_).name +
                ", which is for inference only (with_precision(Precision::float32) brings float "
                "weights back, dequantized)");
    }

    /// A lookup table (Embedding's weight): rows read one at a time by row() and multiplied only
    /// as a tied output layer. with_precision(bf16) and with_weight_type leave a table as it is
    /// (the lookups and a tied output stay float, as a checkpoint's embedding is); a table gets
    /// a stored type only from a file (take_stored), and with_precision(float32) brings it back.
    bool is_table() const noexcept { return table_; }
    void set_table(bool on) noexcept { table_ = on; }

    /// The float master weight (empty once released: callers check released() first).
    Tensor<T>& value() noexcept { return value_; }
    const Tensor<T>& value() const noexcept { return value_; }
    /// The gradient, allocated (zero) on first use; empty once released.
    Tensor<T>& grad() {
        if (!released_ && grad_.shape() != shape_) grad_ = Tensor<T>(shape_);
        return grad_;
    }
    /// Whether the gradient buffer exists.
    bool has_grad() const noexcept { return !released_ && grad_.shape() == shape_; }
    /// The bf16 copy (Precision::bf16), else nullptr.
    const BFloat16* bf16() const noexcept {
        return precision_ == Precision::bf16 ? copy_.data() : nullptr;
    }

    /// Whether prepared weights were asked for (set_prepared(true)); they are used while the
    /// weight is float32 (not bf16, not stored) and the build prepares (prepared()).
    bool prepare_wanted() const noexcept { return prepare_wanted_; }
    /// Whether the products read a prepared copy now: asked for, evaluation mode, float weights
    /// (T = float: oneDNN has no f64 matmul), Precision::float32, not stored, and a build with
    /// oneDNN (ops::prepared_gemm_available()).
    bool prepared() const noexcept { return prepared_ != nullptr; }

    /// The switch of with_prepared_weights: on, the copy is prepared now from the master (a
    /// rank-2 weight whole; a block of a flat holder, MultiheadAttention's in-projection, at its
    /// first product) and again at every refresh(); off, it is freed. Where a prepared copy
    /// cannot be used (see prepared()) the wish is kept and nothing is prepared until it can.
    void set_prepared(bool on) {
        prepare_wanted_ = on;
        prepared_.reset();
        sync_prepared();
    }
    /// The module's mode (Module::train): a prepared copy exists in evaluation mode only, since
    /// in training an optimiser changes the master every step. Training mode frees it; the
    /// caller refreshes after switching to evaluation.
    void set_training(bool on) {
        training_ = on;
        if (on) prepared_.reset();
    }

    /// Replaces the master by `w` (shape() checked by the caller), moved in; the copy follows.
    void replace(Tensor<T>&& w) {
        value_ = std::move(w);
        refresh();
    }

    /// The switch of with_precision, its arguments checked by the caller (detail::
    /// check_precision: bf16 only for float, keep refused once released). A stored weight
    /// leaves its format: released, its float master is the blocks dequantized (exact).
    void set_precision(Precision precision, FloatWeights float_weights) {
        leave_stored();
        if constexpr (std::is_same_v<T, float>) {
            if (precision == Precision::float32) {
                if (released_) {  // the bf16 values widened (exact): the rounding stays
                    Tensor<T> w = Tensor<T>::uninitialized(shape_);
                    to_float(copy_.data(), w.data(), w.numel());
                    value_ = std::move(w);
                    grad_ = Tensor<T>(shape_);  // zero
                    released_ = false;
                }
                copy_ = std::vector<BFloat16>();
            } else if (!released_) {  // released: the copy is all there is, nothing to do
                copy_.resize(static_cast<std::size_t>(numel()));
                precision_ = precision;
                refresh();
                if (float_weights == FloatWeights::release) {  // the storage, not just the size
                    value_ = Tensor<T>(Shape{0});
                    grad_ = Tensor<T>(Shape{0});
                    released_ = true;
                }
            }
        }
        precision_ = precision;
        sync_prepared();
    }

    /// Stores the weight as `type` (float only; a type quant::quantize_row writes; rows of
    /// row_length() values, a multiple of the type's block: all checked by the caller), quantized
    /// once from the float weight as it is now (the master, or the bf16 copy widened, or the
    /// blocks of another stored type dequantized); release frees the master and its gradient.
    void set_stored(quant::Type type, FloatWeights float_weights) {
        if constexpr (std::is_same_v<T, float>) {
            Tensor<T> source = current_float();
            const Index rows = numel() / row_length_;
            const std::uint64_t row_bytes = quant::row_bytes(type, row_length_);
            std::vector<std::uint8_t> blocks(static_cast<std::size_t>(row_bytes * rows));
            for (Index r = 0; r < rows; ++r)
                quant::quantize_row(type, source.data() + r * row_length_,
                                    blocks.data() + r * row_bytes, row_length_);
            if (released_) {  // float weights back only to be dropped again below
                value_ = std::move(source);
                grad_ = Tensor<T>(Shape{0});
                released_ = false;
            }
            copy_ = std::vector<BFloat16>();
            precision_ = Precision::float32;
            blocks_ = std::move(blocks);
            external_ = nullptr;
            keep_alive_.reset();
            stored_ = type;
            if (float_weights == FloatWeights::release) release_master();
            sync_prepared();
        }
    }
    /// Stores the weight as a file's blocks, used as they are (no copy): `data` holds
    /// `bytes` = rows row_bytes(type, row_length()) bytes, valid while `keep_alive` lives (a
    /// GGUF mapping). The float master and its gradient are freed. Checked by the caller.
    void take_stored(quant::Type type, const void* data, std::uint64_t bytes,
                     std::shared_ptr<const void> keep_alive) {
        copy_ = std::vector<BFloat16>();
        precision_ = Precision::float32;
        blocks_ = std::vector<std::uint8_t>();
        external_ = static_cast<const std::uint8_t*>(data);
        external_bytes_ = bytes;
        keep_alive_ = std::move(keep_alive);
        stored_ = type;
        release_master();
        sync_prepared();
    }
    /// The stored weight as quant_matmul reads it: rows [row0, row0 + rows).
    ops::QuantMatrix stored_rows(Index row0, Index rows) const {
        const std::uint64_t row_bytes = quant::row_bytes(stored_, row_length_);
        ops::QuantMatrix m;
        m.type = stored_;
        m.data = stored_data() + row0 * row_bytes;
        m.rows = rows;
        m.cols = row_length_;
        m.bytes = row_bytes * static_cast<std::uint64_t>(rows);
        return m;
    }

    /// Writes row r (of row_length() values) of the float weight as it is now into out: the
    /// master's row, or once released the bf16 copy widened or the stored blocks dequantized
    /// (exact). A lookup table's read (Embedding); r checked by the caller.
    void row(Index r, T* out) const {
        const Index n = row_length_;
        if (!released_) {
            std::copy_n(value_.data() + r * n, n, out);
            return;
        }
        if constexpr (std::is_same_v<T, float>) {
            if (stored()) {
                quant::dequantize_row(stored_, stored_data() + r * quant::row_bytes(stored_, n),
                                      out, n);
                return;
            }
            to_float(copy_.data() + r * n, out, n);
        }
    }

    /// The copies taken anew from the master: the bf16 copy (bf16, not released), the prepared
    /// blocks (prepared()); nothing otherwise.
    void refresh() {
        if constexpr (std::is_same_v<T, float>)
            if (precision_ == Precision::bf16 && !released_)
                to_bf16(value_.data(), copy_.data(), value_.numel());
        sync_prepared();
    }

    /// Bytes as stored: the master (unless released) and the copy; the gradient not counted.
    std::size_t memory_bytes() const noexcept {
        return sizeof(T) * static_cast<std::size_t>(value_.numel()) +
               sizeof(BFloat16) * copy_.size() + blocks_.size() +
               (external_ ? static_cast<std::size_t>(external_bytes_) : 0) +
               (prepared_ ? prepared_->bytes() : 0);
    }

    /// Y [N, out] = X [N, in] W^T + b for a weight of shape [out, in], in the holder's format.
    /// bf16: products in bf16 with float accumulation, the buffers the call's own (const calls
    /// may run at the same time); `current` (training) rounds the master as it is now, since an
    /// optimiser changes it every step, else the copy (which a released weight has alone).
    void forward(ConstMatrixRef<T> X, const T* bias, MatrixRef<T> Y, bool current) const {
        forward_block(X, 0, shape_[0], shape_[1], bias, Y, current);
    }
    /// The same with the block of `rows` rows of `cols` values at element `offset` (one GEMM of
    /// MultiheadAttention's in-projection). The one place where the formats meet the products:
    /// float, bf16 (above), stored (ops::quant_matmul: 8-bit activations for small batches,
    /// dequantized weight panels for large ones; its blocks are rows of row_length() = cols).
    void forward_block(ConstMatrixRef<T> X, Index offset, Index rows, Index cols, const T* bias,
                       MatrixRef<T> Y, bool current) const {
        if constexpr (std::is_same_v<T, float>) {
            if (stored()) {
                HEADWISE_ASSERT(cols == row_length_ && offset % row_length_ == 0);
                ops::QuantMatmulWorkspace workspace;
                ops::quant_matmul(X, stored_rows(offset / row_length_, rows), bias, Y, workspace);
                return;
            }
            if (precision_ == Precision::bf16) {
                ops::Bf16LinearWorkspace workspace;
                std::vector<BFloat16> rounded;
                const ops::ConstBf16Matrix w =
                    current && !released_
                        ? ops::rounded_to_bf16(master_block(offset, rows, cols), rounded)
                        : ops::ConstBf16Matrix(copy_.data() + offset, rows, cols);
                ops::linear_forward_bf16(X, w, bias, Y, workspace);
                return;
            }
        }
        if constexpr (std::is_same_v<T, float>) {
            // Prepared: evaluation reads the copy refresh() took; training (`current`) the
            // master as it is now, since an optimiser changes it every step.
            if (!current && prepared_) {
                const std::shared_ptr<const ops::PreparedMatrix> p =
                    prepared_->find_or_make(value_.data(), offset, rows, cols);
                if (p) {
                    p->forward(X, bias, Y);
                    return;
                }
            }
        }
        ops::linear_forward<T>(X, master_block(offset, rows, cols), bias, Y);
    }

    /// Backward of forward: dX [N, in] += dY W, grad() += dY^T X, grad_bias (if not null) +=
    /// sum(dY). bf16: the operands rounded to bf16, products accumulated in float, gradients
    /// float (mixed precision). Needs the master (the caller refuses a released weight).
    void backward(ConstMatrixRef<T> X, ConstMatrixRef<T> dY, MatrixRef<T> dX, T* grad_bias) {
        Tensor<T>& g = grad();
        if constexpr (std::is_same_v<T, float>) {
            if (precision_ == Precision::bf16) {
                ops::Bf16BackwardWorkspace workspace;
                ops::linear_backward_bf16(X, value_.matrix(), dY, dX, g.matrix(), grad_bias,
                                          workspace);
                return;
            }
        }
        ops::linear_backward<T>(X, value_.matrix(), dY, dX, g.matrix(), grad_bias);
    }

private:
    /// The prepared blocks of one master, each made once (a block at its first product, under
    /// the lock, so that const products may run at the same time). Copies of a WeightMatrix
    /// share it until one of them refreshes, which gives that one new blocks.
    struct PreparedBlocks {
        struct Block {
            Index offset, rows, cols;
            std::shared_ptr<const ops::PreparedMatrix> matrix;  // null: oneDNN refused it
        };
        mutable std::mutex mutex;
        mutable std::vector<Block> blocks;

        std::shared_ptr<const ops::PreparedMatrix> find_or_make(const float* master, Index offset,
                                                                Index rows, Index cols) const {
            const std::lock_guard<std::mutex> lock(mutex);
            for (const Block& b : blocks)
                if (b.offset == offset && b.rows == rows && b.cols == cols) return b.matrix;
            blocks.push_back(
                {offset, rows, cols, ops::PreparedMatrix::make(master + offset, rows, cols, cols)});
            return blocks.back().matrix;
        }
        std::size_t bytes() const {
            const std::lock_guard<std::mutex> lock(mutex);
            std::size_t n = 0;
            for (const Block& b : blocks) n += b.matrix ? b.matrix->bytes() : 0;
            return n;
        }
    };

    /// Prepared blocks made anew from the master when prepared weights are wanted and usable
    /// (the blocks made before again, a rank-2 weight whole), else none.
    void sync_prepared() {
        const bool usable = prepare_wanted_ && !training_ && std::is_same_v<T, float> &&
                            precision_ == Precision::float32 && !stored() && !released_ &&
                            value_.numel() > 0 && ops::prepared_gemm_available();
        if (!usable) {
            prepared_.reset();
            return;
        }
        if constexpr (std::is_same_v<T, float>) {
            auto fresh = std::make_shared<PreparedBlocks>();
            if (prepared_) {
                const std::lock_guard<std::mutex> lock(prepared_->mutex);
                for (const typename PreparedBlocks::Block& b : prepared_->blocks)
                    fresh->blocks.push_back({b.offset, b.rows, b.cols,
                                             ops::PreparedMatrix::make(value_.data() + b.offset,
                                                                       b.rows, b.cols, b.cols)});
            } else if (shape_.rank() == 2) {
                fresh->find_or_make(value_.data(), 0, shape_[0], shape_[1]);
            }
            prepared_ = std::move(fresh);
        }
    }

    MatrixMap<const T> master_block(Index offset, Index rows, Index cols) const {
        return MatrixMap<const T>(value_.data() + offset, rows, cols);
    }
    const std::uint8_t* stored_data() const noexcept {
        return external_ ? external_ : blocks_.data();
    }
    /// The float weight as it is now: the master, the bf16 copy widened, or the stored blocks
    /// dequantized (float only).
    Tensor<T> current_float() const {
        if (!released_) return value_;
        Tensor<T> w = Tensor<T>::uninitialized(shape_);
        if constexpr (std::is_same_v<T, float>) {
            if (stored()) {
                const Index rows = numel() / row_length_;
                const std::uint64_t row_bytes = quant::row_bytes(stored_, row_length_);
                for (Index r = 0; r < rows; ++r)
                    quant::dequantize_row(stored_, stored_data() + r * row_bytes,
                                          w.data() + r * row_length_, row_length_);
            } else {
                to_float(copy_.data(), w.data(), w.numel());
            }
        }
        return w;
    }
    void release_master() {
        value_ = Tensor<T>(Shape{0});
        grad_ = Tensor<T>(Shape{0});
        released_ = true;
    }
    /// Back from a stored format to float: released, the master is the blocks dequantized
    /// (exact) with a zero gradient.
    void leave_stored() {
        if (!stored()) return;
        if (released_) {
            value_ = current_float();
            grad_ = Tensor<T>(shape_);
            released_ = false;
        }
        blocks_ = std::vector<std::uint8_t>();
        external_ = nullptr;
        keep_alive_.reset();
        stored_ = quant::Type::f32;
    }

    Shape shape_{0, 0};
    Index row_length_ = 0;
    Precision precision_ = Precision::float32;
    bool released_ = false;
    bool table_ = false;            // a lookup table: see is_table()
    Tensor<T> value_{Shape{0, 0}};  // the float master; [0] once released
    Tensor<T> grad_{Shape{0, 0}};   // its gradient; allocated on first use; [0] once released
    std::vector<BFloat16> copy_;    // bf16 copy (Precision::bf16), else empty
    quant::Type stored_ = quant::Type::f32;   // a GGUF type when stored, else f32
    std::vector<std::uint8_t> blocks_;        // the stored rows, quantized here
    const std::uint8_t* external_ = nullptr;  // or a file's, borrowed
    std::uint64_t external_bytes_ = 0;
    std::shared_ptr<const void> keep_alive_;          // what keeps external_ valid
    bool prepare_wanted_ = false;                     // set_prepared(true)
    bool training_ = true;                            // the module's mode (set_training)
    std::shared_ptr<const PreparedBlocks> prepared_;  // the prepared copy (prepared()), or null
};

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_WEIGHT_MATRIX_TEMPLATES(C, F, T) C(class, WeightMatrix<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_WEIGHT_MATRIX_TEMPLATES);
