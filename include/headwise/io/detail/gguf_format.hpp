// SPDX-License-Identifier: MIT
// The GGUF format behind io/gguf.hpp: the validating reader (every length, count and offset
// checked against the file before use), the file's bytes (mapped or read), and the atomic
// writer.
#pragma once

#include <algorithm>     // std::sort, std::min
#include <cerrno>        // errno
#include <cstdint>       // std::uint8_t, std::uint32_t, std::uint64_t, std::uintptr_t
#include <cstring>       // std::memcpy
#include <filesystem>    // std::filesystem::is_directory, is_regular_file, exists
#include <fstream>       // std::ifstream
#include <ios>           // std::ios
#include <limits>        // std::numeric_limits
#include <map>           // std::map
#include <memory>        // std::shared_ptr, std::make_shared
#include <set>           // std::set
#include <stdexcept>     // std::runtime_error, std::invalid_argument
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code, std::generic_category
#include <utility>       // std::pair, std::move
#include <vector>        // std::vector

#if __has_include(<sys/mman.h>) && __has_include(<sys/stat.h>) && __has_include(<fcntl.h>) && \
    __has_include(<unistd.h>)
#include <fcntl.h>     // ::open, O_RDONLY, O_CLOEXEC, O_NONBLOCK
#include <sys/mman.h>  // ::mmap, ::munmap, ::madvise
#include <sys/stat.h>  // ::fstat, S_ISREG, S_ISDIR, ...
#include <unistd.h>    // ::close, ::sysconf
#define HEADWISE_GGUF_MMAP 1
#else
#define HEADWISE_GGUF_MMAP 0
#endif

#include "../../config.hpp"
#include "../../quant/types.hpp"
#include "../../shape.hpp"
#include "../gguf_value.hpp"
#include "atomic_file.hpp"

namespace headwise::io {

/// One tensor of a GGUF file, as its tensor info describes it.
struct GgufTensorInfo {
    std::string name;
    quant::Type type = quant::Type::f32;
    /// ggml's order: dims[0] is the row (the contiguous dimension), dims[1] the rows, ...
    /// !! the reverse of a Shape !!
    std::vector<std::uint64_t> dims;
    std::uint64_t offset = 0;  // from the start of the data section
    std::uint64_t bytes = 0;   // of its data
    Index numel = 0;

    /// The row-major shape (last extent contiguous): dims reversed. A tensor of no dims is a
    /// scalar.
    Shape shape() const {
        std::vector<Index> extents(dims.rbegin(), dims.rend());
        return Shape(extents);
    }
};

namespace detail::gguf {

inline constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF", little-endian
inline constexpr std::uint32_t kDefaultAlignment = 32;
/// ggml's GGML_MAX_DIMS.
inline constexpr std::uint32_t kMaxDims = 4;
/// ggml's GGML_MAX_NAME is 64 bytes with the terminating NUL.
inline constexpr std::size_t kMaxTensorName = 63;
/// The deepest arrays of arrays read or written: llama.cpp's files use none, and each level is
/// a recursion.
inline constexpr int kMaxArrayDepth = 8;
/// The fewest bytes a key-value pair (key length 8, empty key impossible so at least 1 byte,
/// type 4, the smallest value 1) and a tensor info (name length 8, name 1, n_dims 4, type 4,
/// offset 8) take in a file.
inline constexpr std::uint64_t kMinPairBytes = 14;
inline constexpr std::uint64_t kMinTensorInfoBytes = 25;

/// At most 80 characters, control and non-ASCII bytes shown as '?'.
inline std::string printable(const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7F) ? c : '?';
    return s.size() > 80 ? out + "..." : out;
}

/// The bytes of a file: mapped (POSIX) or read into memory, kept alive by every GgufFile copy.
class Storage {
public:
    Storage() = default;
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;
    ~Storage() {
#if HEADWISE_GGUF_MMAP
        if (mapped_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
#endif
    }
    static std::shared_ptr<Storage> copy(const std::uint8_t* data, std::size_t size) {
        auto s = std::make_shared<Storage>();
        s->owned_.assign(data, data + size);
        s->data_ = s->owned_.data();
        s->size_ = size;
        return s;
    }
    static std::shared_ptr<Storage> owning(std::vector<std::uint8_t> bytes) {
        auto s = std::make_shared<Storage>();
        s->owned_ = std::move(bytes);
        s->data_ = s->owned_.data();
        s->size_ = s->owned_.size();
        return s;
    }
#if HEADWISE_GGUF_MMAP
    static std::shared_ptr<Storage> mapping(const std::uint8_t* data, std::size_t size) {
        auto s = std::make_shared<Storage>();
        s->data_ = data;
        s->size_ = size;
        s->mapped_ = true;
        return s;
    }
#endif
    const std::uint8_t* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    bool mapped() const noexcept { return mapped_; }
    /// Takes the whole pages inside bytes [offset, offset + count) out of the resident set
    /// (a mapping only; read-only and private, so a later read faults them in from the file
    /// again and sees the same bytes). Returns the bytes released.
    std::size_t release_pages(std::size_t offset, std::size_t count) const noexcept {
#if HEADWISE_GGUF_MMAP
        if (!mapped_ || offset >= size_) return 0;
        count = std::min(count, size_ - offset);
        const long page_size = ::sysconf(_SC_PAGESIZE);
        if (page_size <= 0) return 0;
        const auto page = static_cast<std::uintptr_t>(page_size);
        const auto begin = reinterpret_cast<std::uintptr_t>(data_ + offset);
        const std::uintptr_t first = (begin + page - 1) / page * page;
        const std::uintptr_t last = (begin + count) / page * page;
        if (last <= first) return 0;
        if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
        return static_cast<std::size_t>(last - first);
#else
        static_cast<void>(offset);
        static_cast<void>(count);
        return 0;
#endif
    }

private:
    std::vector<std::uint8_t> owned_;
    const std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
    bool mapped_ = false;
};

/// What the reader makes of a file.
struct Parsed {
    std::uint32_t version = 3;
    std::uint64_t alignment = kDefaultAlignment;
    std::uint64_t data_offset = 0;
    std::vector<std::pair<std::string, GgufValue>> metadata;
    std::vector<GgufTensorInfo> tensors;
};

class Reader {
public:
    Reader(const char* function, const std::string& file, const std::uint8_t* data,
           std::size_t size)
        : function_(function), file_(file), data_(data), size_(size) {}

    Parsed parse() {
        Parsed out;
        if (size_ < 24)
            fail("file of " + std::to_string(size_) +
                 " bytes is too short for a GGUF header (24 bytes: magic, version, tensor "
                 "count, key-value count)");
        if (u32_at(0) != kMagic) {
            static const char* hex = "0123456789abcdef";
            std::string first;
            for (std::size_t i = 0; i < 4; ++i)
                first += std::string(i ? " " : "") + hex[data_[i] >> 4] + hex[data_[i] & 15];
            fail("does not start with the GGUF magic \"GGUF\" (its first bytes are " + first + ")");
        }
        out.version = u32_at(4);
        if ((out.version & 0xFFFFu) == 0 && out.version != 0)
            fail("is a big-endian GGUF file (version field " + std::to_string(out.version) +
                 "); headwise reads little-endian GGUF files");
        if (out.version != 2 && out.version != 3)
            fail("GGUF version " + std::to_string(out.version) +
                 " is not read (headwise reads versions 2 and 3)");
        const std::uint64_t tensor_count = u64_at(8);
        const std::uint64_t pair_count = u64_at(16);
        pos_ = 24;
        const std::uint64_t rest = size_ - pos_;
        if (pair_count > rest / kMinPairBytes || tensor_count > rest / kMinTensorInfoBytes ||
            pair_count * kMinPairBytes + tensor_count * kMinTensorInfoBytes > rest)
            fail("the header declares " + std::to_string(tensor_count) + " tensors and " +
                 std::to_string(pair_count) + " key-value pairs, more than the " +
                 std::to_string(rest) + " bytes after it can hold (" +
                 std::to_string(kMinTensorInfoBytes) + " bytes a tensor info and " +
                 std::to_string(kMinPairBytes) + " a pair at least)");

        std::map<std::string, std::size_t> keys;
        // Reserved up to a bound: a count is only as good as the bytes that follow it.
        out.metadata.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(pair_count, 4096)));
        for (std::uint64_t i = 0; i < pair_count; ++i) {
            context_ = "key-value pair " + std::to_string(i);
            std::string key = read_string("its key");
            if (key.empty()) fail("has an empty key");
            context_ = "key '" + printable(key) + "'";
            if (!keys.emplace(key, out.metadata.size()).second) fail("is declared twice");
            const std::uint32_t type = read_u32("its value type");
            out.metadata.emplace_back(std::move(key), read_value(type, 0));
        }
        if (const auto it = keys.find("general.alignment"); it != keys.end()) {
            context_ = "key 'general.alignment'";
            const GgufValue& a = out.metadata[it->second].second;
            if (a.type() != GgufValueType::uint32)
                fail(std::string("must be a UINT32, not ") + gguf_value_type_name(a.type()) +
                     (a.is_array() ? std::string(" of ") + gguf_value_type_name(a.element_type())
                                   : std::string()));
            out.alignment = a.as_uint();
            if (out.alignment == 0 || (out.alignment & (out.alignment - 1)) != 0)
                fail("is " + std::to_string(out.alignment) + ", not a power of two");
        }

        std::set<std::string> names;
        out.tensors.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(tensor_count, 4096)));
        for (std::uint64_t i = 0; i < tensor_count; ++i) {
            context_ = "tensor info " + std::to_string(i);
            GgufTensorInfo t;
            t.name = read_string("its name");
            if (t.name.empty()) fail("has an empty name");
            context_ = "tensor '" + printable(t.name) + "'";
            if (t.name.size() > kMaxTensorName)
                fail("has a name of " + std::to_string(t.name.size()) +
                     " bytes, longer than ggml's " + std::to_string(kMaxTensorName));
            if (!names.insert(t.name).second) fail("is declared twice");
            const std::uint32_t n_dims = read_u32("its number of dimensions");
            if (n_dims > kMaxDims)
                fail("has " + std::to_string(n_dims) + " dimensions, more than ggml's " +
                     std::to_string(kMaxDims));
            for (std::uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(read_u64("a dimension"));
            const std::uint32_t type = read_u32("its type");
            t.offset = read_u64("its data offset");
            check_tensor(t, type, out.alignment);
            out.tensors.push_back(std::move(t));
        }
        context_.clear();

        // The data section starts at the next multiple of the alignment; a file of no tensors
        // may end before it.
        const std::uint64_t padded = (pos_ + out.alignment - 1) / out.alignment * out.alignment;
        if (padded < pos_ || (padded > size_ && !out.tensors.empty()))
            fail("the data section would start at offset " + std::to_string(padded) +
                 " (the tensor infos end at " + std::to_string(pos_) + ", aligned to " +
                 std::to_string(out.alignment) + "), past the end of the file (" +
                 std::to_string(size_) + " bytes)");
        out.data_offset = std::min<std::uint64_t>(padded, size_);
        const std::uint64_t data_size = size_ - out.data_offset;
        for (const GgufTensorInfo& t : out.tensors)
            if (t.offset > data_size || t.bytes > data_size - t.offset) {
                context_ = "tensor '" + printable(t.name) + "'";
                fail("has its " + std::to_string(t.bytes) + " bytes of data at [" +
                     std::to_string(t.offset) + ", " + end_of(t) +
                     ") of the data section, which holds " + std::to_string(data_size) +
                     " bytes (from offset " + std::to_string(out.data_offset) + " of the file)");
            }
        // No two tensors may share bytes: sorted by offset, each starts at or after the end of
        // the one before.
        std::vector<const GgufTensorInfo*> order;
        for (const GgufTensorInfo& t : out.tensors)
            if (t.bytes > 0) order.push_back(&t);
        std::sort(order.begin(), order.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
            return a->offset < b->offset;
        });
        for (std::size_t i = 1; i < order.size(); ++i)
            if (order[i]->offset < order[i - 1]->offset + order[i - 1]->bytes) {
                context_ = "tensor '" + printable(order[i]->name) + "'";
                fail("has data [" + std::to_string(order[i]->offset) + ", " + end_of(*order[i]) +
                     ") overlapping tensor '" + printable(order[i - 1]->name) + "''s [" +
                     std::to_string(order[i - 1]->offset) + ", " + end_of(*order[i - 1]) + ")");
            }
        return out;
    }

private:
    static std::string end_of(const GgufTensorInfo& t) {
        // Both are bounded by the file size once checked; before, the sum may not fit.
        if (t.bytes > std::numeric_limits<std::uint64_t>::max() - t.offset) return "2^64+";
        return std::to_string(t.offset + t.bytes);
    }

    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error(std::string(function_) + ": " + file_ + ": " +
                                 (context_.empty() ? what : context_ + " " + what));
    }

    std::uint32_t u32_at(std::size_t at) const {
        std::uint32_t v = 0;
        for (std::size_t i = 0; i < 4; ++i)
            v |= static_cast<std::uint32_t>(data_[at + i]) << (8 * i);
        return v;
    }
    std::uint64_t u64_at(std::size_t at) const {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < 8; ++i)
            v |= static_cast<std::uint64_t>(data_[at + i]) << (8 * i);
        return v;
    }

    void need(std::uint64_t n, const std::string& what) const {
        if (n > size_ - pos_)
            fail("is cut off: " + what + " at offset " + std::to_string(pos_) + " needs " +
                 std::to_string(n) + " bytes, but the file ends " + std::to_string(size_ - pos_) +
                 " bytes later");
    }
    std::uint32_t read_u32(const std::string& what) {
        need(4, what);
        const std::uint32_t v = u32_at(pos_);
        pos_ += 4;
        return v;
    }
    std::uint64_t read_u64(const std::string& what) {
        need(8, what);
        const std::uint64_t v = u64_at(pos_);
        pos_ += 8;
        return v;
    }
    std::uint64_t read_bits(std::size_t bytes) {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < bytes; ++i)
            v |= static_cast<std::uint64_t>(data_[pos_ + i]) << (8 * i);
        pos_ += bytes;
        return v;
    }
    std::string read_string(const std::string& what) {
        const std::uint64_t n = read_u64(what + "'s length");
        if (n > size_ - pos_)
            fail("has a string (" + what + ") of " + std::to_string(n) + " bytes at offset " +
                 std::to_string(pos_) + ", past the end of the file (" + std::to_string(size_) +
                 " bytes)");
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n);
        return s;
    }

    /// The fewest bytes one value of `type` takes in a file (an array: its type and count).
    static std::uint64_t min_bytes(GgufValueType type) {
        if (type == GgufValueType::string) return 8;
        if (type == GgufValueType::array) return 12;
        return gguf_scalar_size(type);
    }

    GgufValue read_value(std::uint32_t raw_type, int depth) {
        const auto type = static_cast<GgufValueType>(raw_type);
        if (raw_type > 12)
            fail("has value type " + std::to_string(raw_type) +
                 ", which GGUF does not define (0 to 12)");
        if (type == GgufValueType::string) return GgufValue::string(read_string("the value"));
        if (type != GgufValueType::array) {
            const std::size_t size = gguf_scalar_size(type);
            need(size, std::string("its ") + gguf_value_type_name(type));
            if (type == GgufValueType::boolean && data_[pos_] > 1)
                fail("has the BOOL byte " + std::to_string(data_[pos_]) + " at offset " +
                     std::to_string(pos_) + ", expected 0 or 1");
            return GgufValue::scalar(type, read_bits(size));
        }
        if (depth + 1 > kMaxArrayDepth)
            fail("has arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
        const std::uint32_t raw_element = read_u32("an array's element type");
        if (raw_element > 12)
            fail("has an array of value type " + std::to_string(raw_element) +
                 ", which GGUF does not define (0 to 12)");
        const auto element = static_cast<GgufValueType>(raw_element);
        const std::uint64_t count = read_u64("an array's length");
        const std::uint64_t left = size_ - pos_;
        if (count > left / min_bytes(element))
            fail("has an array of " + std::to_string(count) + " " + gguf_value_type_name(element) +
                 " values at offset " + std::to_string(pos_) + ", more than the " +
                 std::to_string(left) + " bytes left in the file hold");
        const std::size_t size = gguf_scalar_size(element);
        if (size != 0) {
            const std::size_t bytes = static_cast<std::size_t>(count) * size;
            if (element == GgufValueType::boolean)
                for (std::size_t i = 0; i < bytes; ++i)
                    if (data_[pos_ + i] > 1)
                        fail("has the BOOL byte " + std::to_string(data_[pos_ + i]) +
                             " at offset " + std::to_string(pos_ + i) + ", expected 0 or 1");
            std::string raw(reinterpret_cast<const char*>(data_ + pos_), bytes);
            pos_ += bytes;
            return GgufValue::scalar_array(element, std::move(raw));
        }
        std::vector<GgufValue> items;
        items.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(count, 4096)));
        for (std::uint64_t i = 0; i < count; ++i)
            items.push_back(read_value(raw_element, depth + 1));
        return GgufValue::array(element, std::move(items));
    }

    void check_tensor(GgufTensorInfo& t, std::uint32_t type, std::uint64_t alignment) const {
        if (!quant::is_readable(type))
            fail("has type " + quant::describe_type(type) + ", which headwise does not read; " +
                 "it reads " + quant::readable_types());
        t.type = static_cast<quant::Type>(type);
        const quant::BlockFormat f = quant::block_format(t.type);
        std::string dims = "[";
        for (std::size_t d = 0; d < t.dims.size(); ++d)
            dims += (d ? ", " : "") + std::to_string(t.dims[d]);
        dims += "]";
        constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<Index>::max());
        std::uint64_t numel = 1;
        for (const std::uint64_t n : t.dims) {
            if (n > kMax || (n != 0 && numel > kMax / n))
                fail("has dimensions " + dims + " (ggml order) of more elements than " +
                     std::to_string(kMax));
            numel *= n;
        }
        const std::uint64_t row = t.dims.empty() ? 1 : t.dims[0];
        if (row % static_cast<std::uint64_t>(f.block_size) != 0)
            fail("of type " + std::string(f.name) + " has rows of " + std::to_string(row) +
                 " values (dimension 0 of " + dims + "), not a multiple of its block size " +
                 std::to_string(f.block_size));
        // numel / block_size blocks: no overflow, each block at most 210 bytes and numel < 2^63.
        const std::uint64_t blocks = numel / static_cast<std::uint64_t>(f.block_size);
        if (blocks >
            std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(f.block_bytes))
            fail("has dimensions " + dims + " whose byte count overflows 64 bits");
        t.bytes = blocks * static_cast<std::uint64_t>(f.block_bytes);
        t.numel = static_cast<Index>(numel);
        if (t.offset % alignment != 0)
            fail("has data offset " + std::to_string(t.offset) +
                 ", not a multiple of the alignment " + std::to_string(alignment));
    }

    const char* function_;
    std::string file_;
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
    std::string context_;  // "key 'general.name'", "tensor 'x'": what the messages are about
};

/// What a file of this mode is, for the message refusing it.
inline const char* kind_name(unsigned mode) {
#if HEADWISE_GGUF_MMAP
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
#endif
    static_cast<void>(mode);
    return "not a regular file";
}

/// The bytes of the regular file `path`, mapped where the system can (no copy of the weights:
/// the page cache's pages are the bytes), read into memory otherwise.
inline std::shared_ptr<Storage> open_file(const char* function, const std::string& path) {
    const auto fail = [&](const std::string& what) {
        throw std::runtime_error(std::string(function) + ": " + path + ": " + what);
    };
#if HEADWISE_GGUF_MMAP
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer. The kind is checked on the
    // opened file, so that it cannot change between the check and the read.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail("cannot open the file (" + std::generic_category().message(errno) + ")");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int error = errno;
        ::close(fd);
        fail("cannot inspect the file (" + std::generic_category().message(error) + ")");
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        const std::string kind = kind_name(static_cast<unsigned>(st.st_mode));
        fail(kind == "not a regular file" ? "is not a regular file"
                                          : "is " + kind + ", not a regular file");
    }
    const auto length = static_cast<std::size_t>(st.st_size);
    if (length == 0) {
        ::close(fd);
        return Storage::owning({});
    }
    void* mapped = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (mapped != MAP_FAILED)
        return Storage::mapping(static_cast<const std::uint8_t*>(mapped), length);
#endif
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail("is a directory, not a regular file");
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
        fail("is not a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open the file");
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    if (size < 0) fail("cannot tell the file's size");
    in.seekg(0, std::ios::beg);
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
    if (size > 0) in.read(reinterpret_cast<char*>(bytes.data()), size);
    if (in.gcount() != size)
        fail("read " + std::to_string(in.gcount()) + " of the file's " + std::to_string(size) +
             " bytes");
    return Storage::owning(std::move(bytes));
}

}  // namespace detail::gguf
}  // namespace headwise::io
