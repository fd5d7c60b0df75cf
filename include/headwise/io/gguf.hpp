// SPDX-License-Identifier: MIT
// Reading and writing GGUF files (llama.cpp's weight format, versions 2 and 3): metadata, tensor
// infos, and tensors of the types in quant/types.hpp, memory-mapped where the system allows.
#pragma once

#include <cstdint>     // std::uint8_t, std::uint32_t, std::uint64_t
#include <functional>  // std::function
#include <map>         // std::map
#include <memory>      // std::shared_ptr
#include <set>         // std::set
#include <stdexcept>   // std::runtime_error, std::invalid_argument
#include <string>      // std::string, std::to_string
#include <utility>     // std::pair, std::move
#include <vector>      // std::vector

#include "../config.hpp"
#include "../quant/dequantize.hpp"
#include "../quant/types.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/atomic_file.hpp"
#include "detail/gguf_format.hpp"
#include "gguf_value.hpp"

namespace headwise::io {

// ---- declarations ----------------------------------------------------------------------------

/// A GGUF file (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): "GGUF", a version,
/// the tensor and key-value counts, the key-value pairs (metadata), the tensor infos (name,
/// dims, type, offset), then, from the next multiple of the alignment (`general.alignment`,
/// default 32), the tensors' data. Its bytes stay mapped (or in memory) while any copy of the
/// GgufFile lives, and tensor_data() points into them: loading copies no weights.
class GgufFile {
public:
    std::uint32_t version() const noexcept { return parsed_.version; }
    std::uint64_t alignment() const noexcept { return parsed_.alignment; }
    /// Where the data section starts in the file.
    std::uint64_t data_offset() const noexcept { return parsed_.data_offset; }
    /// The name the file was opened by (a path, or parse_gguf's `name`).
    const std::string& name() const noexcept { return name_; }
    /// True when the bytes are mapped from the file rather than held in memory.
    bool mapped() const noexcept { return storage_->mapped(); }

    /// The key-value pairs in file order.
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const noexcept {
        return parsed_.metadata;
    }
    /// The value of `key`, or nullptr.
    const GgufValue* find(const std::string& key) const;
    /// The value of `key`; throws std::out_of_range naming the file and the key.
    const GgufValue& value(const std::string& key) const;

    /// The tensor infos in file order.
    const std::vector<GgufTensorInfo>& tensors() const noexcept { return parsed_.tensors; }
    const GgufTensorInfo* find_tensor(const std::string& name) const;
    /// Throws std::out_of_range naming the file and the tensor.
    const GgufTensorInfo& tensor(const std::string& name) const;
    /// The tensor's bytes (info.bytes of them: rows of blocks, see quant/dequantize.hpp).
    const std::uint8_t* tensor_data(const GgufTensorInfo& info) const noexcept {
        return storage_->data() + parsed_.data_offset + info.offset;
    }
    /// The tensor dequantized to float, shape info.shape() (dims reversed, row-major).
    Tensor<float> to_float(const std::string& name) const;

    /// An owner of the file's bytes alone: tensor_data() stays valid while it lives, and the
    /// metadata (a model's vocabulary can take tens of megabytes) may go with the GgufFile.
    std::shared_ptr<const void> bytes_owner() const noexcept { return storage_; }
    /// Says that this process will not read the tensor's bytes again (a loader that copied
    /// them): where the file is mapped, the whole memory pages inside them leave the resident
    /// set. Reading them later stays valid: the pages are read from the file again. Returns
    /// the bytes released (0 where the file is held in memory).
    std::size_t release_pages(const GgufTensorInfo& info) const noexcept {
        return storage_->release_pages(static_cast<std::size_t>(parsed_.data_offset + info.offset),
                                       static_cast<std::size_t>(info.bytes));
    }

private:
    friend GgufFile load_gguf(const std::string& path);
    friend GgufFile parse_gguf(const std::uint8_t* data, std::size_t size, const std::string& name);
    GgufFile(const char* function, std::string name,
             std::shared_ptr<detail::gguf::Storage> storage);

    std::string name_;
    std::shared_ptr<detail::gguf::Storage> storage_;
    detail::gguf::Parsed parsed_;
    std::map<std::string, std::size_t> keys_, tensor_index_;
};

/// Opens and validates a GGUF file. `path` must be a regular file (a directory, device, FIFO
/// or socket is refused without being read); it is mapped (POSIX) or read into memory. Checked
/// before anything is returned: the magic; version 2 or 3, little-endian; the counts against
/// the bytes that follow; every string's length, array length and value within the file; value
/// types 0 to 12, BOOL bytes 0 or 1, arrays nested at most 8 deep; no key and no tensor name
/// twice, none empty, tensor names at most 63 bytes; `general.alignment` a UINT32 power of two;
/// at most 4 dims whose element count and byte count fit; a type headwise reads (quant::Type)
/// and rows a multiple of its block size; offsets multiples of the alignment, data inside the
/// file and no two tensors' data overlapping. Any problem throws std::runtime_error naming the
/// function, the file and the key or tensor, quoting at most 80 bytes of any name:
///   "headwise::io::load_gguf: model.gguf: tensor 'blk.0.ffn_up.weight' has type IQ2_XS (16),
///    which headwise does not read; it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
///    Q4_K, Q6_K"
GgufFile load_gguf(const std::string& path);

/// The same from bytes in memory (copied); `name` stands for the file in messages.
GgufFile parse_gguf(const std::uint8_t* data, std::size_t size,
                    const std::string& name = "<memory>");

/// A tensor to write: `bytes` holds row_bytes(type, shape[-1]) * (rows) bytes, rows of blocks
/// as quant/quantize.hpp writes them. `shape` is row-major (last extent contiguous, as Tensor's);
/// the file stores it reversed (ggml's dims).
struct GgufTensorData {
    std::string name;
    quant::Type type = quant::Type::f32;
    Shape shape;
    const void* bytes = nullptr;
};

/// Writes a GGUF v3 file: the pairs in the order given, the tensor infos and data in the order
/// given, each tensor's data at the next multiple of `alignment` (zero padding). An alignment
/// other than 32 is recorded as `general.alignment` (UINT32) unless `metadata` has that key,
/// which must then be a UINT32 equal to it. The save is atomic like save_safetensors's: a save
/// that fails leaves the previous file as it was and no temporary file behind, and a target
/// that exists and is not a regular file is refused. Throws std::invalid_argument, before
/// anything is written, for an empty, repeated or over-long (64 bytes and more) tensor name, an
/// empty or repeated key, a type headwise does not read, a shape of rank 0 or above 4 whose last
/// extent is no multiple of the block size, null bytes for a non-empty tensor, arrays nested
/// deeper than 8, an alignment that is not a power of two; std::runtime_error naming the file
/// when writing fails.
void save_gguf(const std::string& path,
               const std::vector<std::pair<std::string, GgufValue>>& metadata,
               const std::vector<GgufTensorData>& tensors, std::uint32_t alignment = 32);

// ---- definitions -----------------------------------------------------------------------------

inline GgufFile::GgufFile(const char* function, std::string name,
                          std::shared_ptr<detail::gguf::Storage> storage)
    : name_(std::move(name)), storage_(std::move(storage)) {
    detail::gguf::Reader reader(function, name_, storage_->data(), storage_->size());
    parsed_ = reader.parse();
    for (std::size_t i = 0; i < parsed_.metadata.size(); ++i)
        keys_.emplace(parsed_.metadata[i].first, i);
    for (std::size_t i = 0; i < parsed_.tensors.size(); ++i)
        tensor_index_.emplace(parsed_.tensors[i].name, i);
}

inline const GgufValue* GgufFile::find(const std::string& key) const {
    const auto it = keys_.find(key);
    return it == keys_.end() ? nullptr : &parsed_.metadata[it->second].second;
}

inline const GgufValue& GgufFile::value(const std::string& key) const {
    if (const GgufValue* v = find(key)) return *v;
    throw std::out_of_range("headwise::io::GgufFile::value: " + name_ + ": no key '" +
                            detail::gguf::printable(key) + "'");
}

inline const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &parsed_.tensors[it->second];
}

inline const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
    if (const GgufTensorInfo* t = find_tensor(name)) return *t;
    throw std::out_of_range("headwise::io::GgufFile::tensor: " + name_ + ": no tensor '" +
                            detail::gguf::printable(name) + "'");
}

inline Tensor<float> GgufFile::to_float(const std::string& name) const {
    const GgufTensorInfo& t = tensor(name);
    Tensor<float> out = Tensor<float>::uninitialized(t.shape());  // dims reversed
    const Index row = t.dims.empty() ? 1 : static_cast<Index>(t.dims[0]);
    if (row == 0 || t.numel == 0) return out;
    const auto row_bytes = static_cast<std::size_t>(quant::row_bytes(t.type, row));
    const std::uint8_t* src = tensor_data(t);
    for (Index r = 0; r < t.numel / row; ++r)
        quant::dequantize_row(t.type, src + static_cast<std::size_t>(r) * row_bytes,
                              out.data() + r * row, row);
    return out;
}

inline GgufFile load_gguf(const std::string& path) {
    constexpr const char* fn = "headwise::io::load_gguf";
    return GgufFile(fn, path, detail::gguf::open_file(fn, path));
}

inline GgufFile parse_gguf(const std::uint8_t* data, std::size_t size, const std::string& name) {
    return GgufFile("headwise::io::parse_gguf", name, detail::gguf::Storage::copy(data, size));
}

namespace detail::gguf {

inline void check_value(const std::function<void(const std::string&)>& reject, const GgufValue& v,
                        int depth) {
    if (static_cast<std::uint32_t>(v.type()) > 12)
        reject("has value type " + std::to_string(static_cast<std::uint32_t>(v.type())) +
               ", which GGUF does not define (0 to 12)");
    if (!v.is_array()) return;
    if (depth + 1 > kMaxArrayDepth)
        reject("has arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    for (const GgufValue& item : v.items()) check_value(reject, item, depth + 1);
}

template <class Out>
void put_u32(Out& out, std::uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    out.write(b, 4);
}
template <class Out>
void put_u64(Out& out, std::uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    out.write(b, 8);
}
template <class Out>
void put_string(Out& out, const std::string& s) {
    put_u64(out, s.size());
    out.write(s.data(), s.size());
}
/// A value without its type (which the caller writes: before a pair's value, once per array).
template <class Out>
void put_value(Out& out, const GgufValue& v) {
    if (v.type() == GgufValueType::string) return put_string(out, v.as_string());
    if (!v.is_array()) {
        unsigned char b[8];
        const std::size_t size = gguf_scalar_size(v.type());
        for (std::size_t i = 0; i < size; ++i)
            b[i] = static_cast<unsigned char>(v.bits() >> (8 * i));
        return out.write(b, size);
    }
    put_u32(out, static_cast<std::uint32_t>(v.element_type()));
    put_u64(out, v.size());
    if (gguf_scalar_size(v.element_type()) != 0)
        return out.write(v.bytes().data(), v.bytes().size());
    for (const GgufValue& item : v.items()) put_value(out, item);
}

template <class Write>
void save(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
          const std::vector<GgufTensorData>& tensors, std::uint32_t alignment, Write write) {
    constexpr const char* fn = "headwise::io::save_gguf";
    const auto reject = [&](const std::string& what) {
        throw std::invalid_argument(std::string(fn) + ": " + path + ": " + what);
    };
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        reject("alignment " + std::to_string(alignment) + " is not a power of two");
    std::vector<std::pair<std::string, GgufValue>> pairs = metadata;
    std::set<std::string> keys;
    bool has_alignment = false;
    for (const auto& [key, value] : pairs) {
        const std::string what = "key '" + printable(key) + "' ";
        if (key.empty()) reject("a key is empty");
        if (!keys.insert(key).second) reject(what + "is given twice");
        check_value([&](const std::string& w) { reject(what + w); }, value, 0);
        if (key == "general.alignment") {
            has_alignment = true;
            if (value.type() != GgufValueType::uint32 || value.as_uint() != alignment)
                reject(what + "must be the UINT32 " + std::to_string(alignment) +
                       ", the alignment the file is written with");
        }
    }
    if (alignment != kDefaultAlignment && !has_alignment)
        pairs.emplace_back("general.alignment", GgufValue::uint32(alignment));

    struct Planned {
        std::vector<std::uint64_t> dims;  // ggml order
        std::uint64_t offset = 0, bytes = 0;
    };
    std::vector<Planned> plan;
    std::set<std::string> names;
    std::uint64_t offset = 0;
    for (const GgufTensorData& t : tensors) {
        const std::string what = "tensor '" + printable(t.name) + "' ";
        if (t.name.empty()) reject("a tensor name is empty");
        if (t.name.size() > kMaxTensorName)
            reject(what + "has a name of " + std::to_string(t.name.size()) +
                   " bytes, longer than ggml's " + std::to_string(kMaxTensorName));
        if (!names.insert(t.name).second) reject(what + "is given twice");
        if (!quant::is_readable(static_cast<std::uint32_t>(t.type)))
            reject(what + "has type " + quant::describe_type(static_cast<std::uint32_t>(t.type)) +
                   ", which headwise does not write; it writes " + quant::readable_types());
        if (t.shape.rank() < 1 || t.shape.rank() > static_cast<int>(kMaxDims))
            reject(what + "has shape " + t.shape.str() + ": GGUF tensors have 1 to 4 dims");
        const quant::BlockFormat f = quant::block_format(t.type);
        const Index row = t.shape[t.shape.rank() - 1];
        if (row % f.block_size != 0)
            reject(what + "of type " + f.name + " has shape " + t.shape.str() + ": its rows of " +
                   std::to_string(row) + " values are no multiple of the block size " +
                   std::to_string(f.block_size));
        Planned p;
        for (int d = t.shape.rank() - 1; d >= 0; --d)
            p.dims.push_back(static_cast<std::uint64_t>(t.shape[d]));
        p.bytes = static_cast<std::uint64_t>(t.shape.numel() / f.block_size) *
                  static_cast<std::uint64_t>(f.block_bytes);
        if (p.bytes > 0 && t.bytes == nullptr) reject(what + "has no bytes (a null pointer)");
        p.offset = offset;
        offset += (p.bytes + alignment - 1) / alignment * alignment;
        plan.push_back(std::move(p));
    }

    ::headwise::detail::AtomicFile<Write> out(fn, path, std::move(write));
    put_u32(out, kMagic);
    put_u32(out, 3);
    put_u64(out, tensors.size());
    put_u64(out, pairs.size());
    std::uint64_t position = 24;
    struct Counting {  // the header's length, for the padding before the data
        ::headwise::detail::AtomicFile<Write>& file;
        std::uint64_t& position;
        void write(const void* data, std::size_t size) {
            file.write(data, size);
            position += size;
        }
    } counted{out, position};
    for (const auto& [key, value] : pairs) {
        put_string(counted, key);
        put_u32(counted, static_cast<std::uint32_t>(value.type()));
        put_value(counted, value);
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        put_string(counted, tensors[i].name);
        put_u32(counted, static_cast<std::uint32_t>(plan[i].dims.size()));
        for (const std::uint64_t d : plan[i].dims) put_u64(counted, d);
        put_u32(counted, static_cast<std::uint32_t>(tensors[i].type));
        put_u64(counted, plan[i].offset);
    }
    const std::vector<unsigned char> zeros(alignment, 0);
    const auto pad = [&](std::uint64_t length) {
        const std::uint64_t n = (alignment - length % alignment) % alignment;
        out.write(zeros.data(), static_cast<std::size_t>(n));
    };
    pad(position);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        if (plan[i].bytes > 0) out.write(tensors[i].bytes, static_cast<std::size_t>(plan[i].bytes));
        pad(plan[i].bytes);
    }
    out.commit();
}

}  // namespace detail::gguf

inline void save_gguf(const std::string& path,
                      const std::vector<std::pair<std::string, GgufValue>>& metadata,
                      const std::vector<GgufTensorData>& tensors, std::uint32_t alignment) {
    detail::gguf::save(path, metadata, tensors, alignment, ::headwise::detail::SystemWrite());
}

}  // namespace headwise::io
