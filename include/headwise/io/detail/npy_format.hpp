// SPDX-License-Identifier: MIT
// The .npy format behind io/npy.hpp: dtypes, the header parser, element encoding and the atomic
// writer.
#pragma once

#include <algorithm>     // std::min
#include <cmath>         // std::isfinite, std::fabs, std::signbit
#include <cstddef>       // std::size_t
#include <cstdint>       // std::uint16_t, std::uint32_t, std::uint64_t
#include <cstring>       // std::memcpy
#include <filesystem>    // std::filesystem::path, directory_iterator, create_directories
#include <fstream>       // std::ifstream
#include <ios>           // std::ios, std::streamoff, std::streamsize
#include <istream>       // std::istream
#include <limits>        // std::numeric_limits
#include <map>           // std::map
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code
#include <type_traits>   // std::is_same_v, std::is_const_v, std::enable_if_t
#include <utility>       // std::move
#include <vector>        // std::vector

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "../npy_header.hpp"
#include "atomic_file.hpp"
#include "file_kind.hpp"

namespace headwise::io::detail::npy {

// The format: magic "\x93NUMPY", major and minor version bytes, the header length (uint16
// little-endian in version 1, uint32 in versions 2 and 3), then an ASCII (version 3: UTF-8)
// Python dict literal such as "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"
// padded with spaces and a newline so the data starts on a 64-byte boundary, then the data.
inline constexpr char kMagic[] = "\x93NUMPY";
inline constexpr std::size_t kMagicSize = 6;
inline constexpr std::size_t kAlignment = 64;
// Real headers are a few hundred bytes; a larger length field means a corrupt file, and refusing
// it avoids allocating whatever a random length asks for.
inline constexpr std::uint32_t kMaxHeaderSize = 1u << 20;
// Data is converted through a buffer of this many bytes rather than read whole.
inline constexpr std::size_t kChunkBytes = std::size_t{1} << 16;

enum class Dtype { f4, f8, b1 };

inline std::size_t item_size(Dtype dtype) {
    return dtype == Dtype::f8 ? 8 : dtype == Dtype::f4 ? 4 : 1;
}

template <class T>
const char* scalar_name() {
    if constexpr (std::is_same_v<T, float>) return "float";
    if constexpr (std::is_same_v<T, double>) return "double";
    if constexpr (std::is_same_v<T, bool>) return "bool";
}

template <class T>
constexpr Dtype dtype_of() {
    if constexpr (std::is_same_v<T, float>) return Dtype::f4;
    if constexpr (std::is_same_v<T, double>) return Dtype::f8;
    if constexpr (std::is_same_v<T, bool>) return Dtype::b1;
}

inline const char* descr_of(Dtype dtype) {
    return dtype == Dtype::f8 ? "<f8" : dtype == Dtype::f4 ? "<f4" : "|b1";
}

[[noreturn]] inline void fail(const char* function, const std::string& path,
                              const std::string& what) {
    throw std::runtime_error(std::string(function) + ": " + path + ": " + what);
}

/// Header text safe to quote in a message: control and non-ASCII bytes as '?', at most 120 chars.
inline std::string printable(const std::string& text) {
    std::string out;
    for (const char c : text) {
        if (out.size() == 120) return out + "...";
        const auto u = static_cast<unsigned char>(c);
        out += (u >= 0x20 && u < 0x7f) ? c : '?';
    }
    return out;
}

/// Recursive-descent parser of the header dict. Accepts what numpy.save writes (any key order,
/// either quote, optional trailing commas, Python 2 "3L" extents) and nothing else.
class HeaderParser {
public:
    HeaderParser(const char* function, const std::string& path, std::string text)
        : function_(function), path_(path), text_(std::move(text)) {}

    void parse(NpyHeader& header) {
        bool have_descr = false, have_order = false, have_shape = false;
        skip_space();
        expect('{');
        for (;;) {
            skip_space();
            if (peek() == '}') break;
            const std::size_t key_start = pos_;
            const std::string key = parse_string("a key");
            skip_space();
            expect(':');
            skip_space();
            bool* seen = nullptr;
            if (key == "descr") {
                header.descr = parse_string("the dtype string, e.g. '<f4',");
                seen = &have_descr;
            } else if (key == "fortran_order") {
                header.fortran_order = parse_bool();
                seen = &have_order;
            } else if (key == "shape") {
                header.shape = parse_shape();
                seen = &have_shape;
            } else {
                error("unknown key '" + key + "'", key_start);
            }
            if (*seen) error("duplicate key '" + key + "'", key_start);
            *seen = true;
            skip_space();
            if (peek() == ',') {
                ++pos_;
            } else if (peek() != '}') {
                error("expected ',' or '}'");
            }
        }
        ++pos_;  // '}'
        skip_space();
        if (pos_ != text_.size()) error("unexpected characters after '}'");
        if (!have_descr) error("missing key 'descr'");
        if (!have_order) error("missing key 'fortran_order'");
        if (!have_shape) error("missing key 'shape'");
    }

private:
    /// Throws, quoting the header and the 0-based offset `at` (default: the current one).
    [[noreturn]] void error(const std::string& what, std::size_t at = std::string::npos) const {
        fail(function_, path_,
             "malformed header: " + what + " at character " +
                 std::to_string(at == std::string::npos ? pos_ : at) + " of \"" + printable(text_) +
                 "\"");
    }
    char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
    void skip_space() {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                       text_[pos_] == '\t' || text_[pos_] == '\r'))
            ++pos_;
    }
    void expect(char c) {
        if (peek() != c) error(std::string("expected '") + c + "'");
        ++pos_;
    }
    std::string parse_string(const char* what) {
        const char quote = peek();
        if (quote != '\'' && quote != '"') error(std::string("expected ") + what + " in quotes");
        const std::size_t end = text_.find(quote, pos_ + 1);
        if (end == std::string::npos) error("unterminated string");
        std::string s = text_.substr(pos_ + 1, end - pos_ - 1);
        if (s.find('\\') != std::string::npos) error("escape sequences are not supported");
        pos_ = end + 1;
        return s;
    }
    bool parse_bool() {
        if (text_.compare(pos_, 4, "True") == 0) {
            pos_ += 4;
            return true;
        }
        if (text_.compare(pos_, 5, "False") == 0) {
            pos_ += 5;
            return false;
        }
        error("expected True or False");
    }
    Shape parse_shape() {
        expect('(');
        std::vector<Index> dims;
        for (;;) {
            skip_space();
            if (peek() == ')') break;
            if (peek() < '0' || peek() > '9') error("expected a non-negative integer extent");
            std::uint64_t value = 0;
            while (peek() >= '0' && peek() <= '9') {
                const auto digit = static_cast<std::uint64_t>(peek() - '0');
                if (value >
                    (static_cast<std::uint64_t>(std::numeric_limits<Index>::max()) - digit) / 10)
                    error("extent too large");
                value = value * 10 + digit;
                ++pos_;
            }
            if (peek() == 'L') ++pos_;  // Python 2 long literal
            dims.push_back(static_cast<Index>(value));
            if (static_cast<int>(dims.size()) > Shape::kMaxRank)
                error("rank above the maximum " + std::to_string(Shape::kMaxRank));
            skip_space();
            if (peek() == ',') {
                ++pos_;
            } else if (peek() != ')') {
                error("expected ',' or ')' in the shape");
            }
        }
        // Every element count headwise computes from the shape must fit in Index.
        Index nonzero = 1;
        for (const Index d : dims)
            if (d != 0 && __builtin_mul_overflow(nonzero, d, &nonzero))
                error("the product of the extents overflows a " +
                      std::to_string(sizeof(Index) * 8) + "-bit element count");
        ++pos_;  // ')'
        return Shape(dims);
    }

    const char* function_;
    const std::string& path_;
    std::string text_;
    std::size_t pos_ = 0;
};

/// Reads the magic string, version and header from `in`, leaving it at the first data byte.
inline NpyHeader read_header(const char* function, const std::string& path, std::istream& in) {
    unsigned char prefix[kMagicSize + 2];
    if (!in.read(reinterpret_cast<char*>(prefix), sizeof prefix) ||
        std::memcmp(prefix, kMagic, kMagicSize) != 0) {
        // A file of another kind (a safetensors file, a PyTorch checkpoint, an .npz, ...) is
        // named, with what to do instead.
        std::uint64_t file_size = 0;
        const std::vector<std::uint8_t> head =
            ::headwise::detail::read_file_prefix(path, file_size);
        const std::string foreign = ::headwise::detail::foreign_file_message(
            ::headwise::detail::file_kind(head.data(), head.size(), file_size),
            ::headwise::detail::FileKind::npy, path);
        if (!foreign.empty()) fail(function, path, foreign);
        fail(function, path, "not a .npy file (it does not start with \"\\x93NUMPY\")");
    }
    NpyHeader header;
    header.major_version = prefix[kMagicSize];
    const int minor = prefix[kMagicSize + 1];
    if (header.major_version < 1 || header.major_version > 3 || minor != 0)
        fail(function, path,
             "unsupported .npy format version " + std::to_string(header.major_version) + "." +
                 std::to_string(minor) + " (headwise reads 1.0, 2.0 and 3.0)");
    // Version 1 stores the header length as uint16, versions 2 and 3 as uint32, little-endian.
    const std::size_t width = header.major_version == 1 ? 2 : 4;
    unsigned char length_bytes[4] = {0, 0, 0, 0};
    if (!in.read(reinterpret_cast<char*>(length_bytes), static_cast<std::streamsize>(width)))
        fail(function, path, "file ends inside the header length field");
    std::uint32_t length = 0;
    for (std::size_t i = width; i-- > 0;) length = (length << 8) | length_bytes[i];
    if (length > kMaxHeaderSize)
        fail(function, path, "header length " + std::to_string(length) + " is implausibly large");
    std::string text(length, '\0');
    if (length > 0 && !in.read(text.data(), static_cast<std::streamsize>(length)))
        fail(function, path,
             "file ends inside the header (it announces " + std::to_string(length) + " bytes)");
    HeaderParser(function, path, std::move(text)).parse(header);
    header.data_offset = static_cast<Index>(kMagicSize + 2 + width + length);
    return header;
}

inline std::ifstream open_for_reading(const char* function, const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) fail(function, path, "no such file");
    if (std::filesystem::is_directory(path, ec)) fail(function, path, "is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(function, path, "cannot open for reading");
    return in;
}

/// The dtype a header names, if headwise reads it; throws otherwise.
inline Dtype parse_dtype(const char* function, const std::string& path, const std::string& descr) {
    if (descr == "<f4") return Dtype::f4;
    if (descr == "<f8") return Dtype::f8;
    if (descr == "|b1") return Dtype::b1;
    if (descr == ">f4" || descr == ">f8")
        fail(function, path,
             "big-endian data ('" + descr +
                 "') is not supported; save it little-endian, e.g. np.save(path, a.astype('<" +
                 descr.substr(1) + "'))");
    fail(function, path,
         "dtype '" + descr +
             "' is not supported (headwise reads float32 '<f4', float64 '<f8' and bool '|b1')");
}

inline std::uint64_t load_le(const unsigned char* p, std::size_t bytes) {
    std::uint64_t v = 0;
    for (std::size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

inline void store_le(std::uint64_t v, unsigned char* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i, v >>= 8) p[i] = static_cast<unsigned char>(v & 0xffu);
}

/// double to T, rounding to nearest as IEEE 754 does. A finite double beyond float's range
/// becomes +-inf or +-max explicitly: a plain cast of such a value is undefined behaviour in C++.
template <class T>
T narrow(double d) {
    if constexpr (std::is_same_v<T, float>) {
        constexpr double kMax = static_cast<double>(std::numeric_limits<float>::max());
        constexpr double kHalfwayToInf = 0x1.ffffffp127;  // max + half an ulp: ties go to inf
        if (std::isfinite(d) && std::fabs(d) > kMax) {
            const float big = std::fabs(d) >= kHalfwayToInf ? std::numeric_limits<float>::infinity()
                                                            : std::numeric_limits<float>::max();
            return std::signbit(d) ? -big : big;
        }
    }
    return static_cast<T>(d);
}

/// Converts `count` elements of `dtype` at `src` into `dst`. Assembling each value from its
/// little-endian bytes (instead of copying memory) makes the result independent of the host's
/// byte order. Returns the index of the first bool byte that is neither 0 nor 1, or -1.
template <class T>
Index decode(Dtype dtype, const unsigned char* src, Index count, T* dst) {
    for (Index i = 0; i < count; ++i) {
        const unsigned char* p = src + static_cast<std::size_t>(i) * item_size(dtype);
        if constexpr (std::is_same_v<T, bool>) {
            HEADWISE_ASSERT(dtype == Dtype::b1);
            if (*p > 1) return i;
            dst[i] = *p != 0;
        } else if (dtype == Dtype::f4) {
            // The same type takes the bits as they are: no conversion that could quiet a NaN.
            const auto bits = static_cast<std::uint32_t>(load_le(p, 4));
            if constexpr (std::is_same_v<T, float>) {
                std::memcpy(dst + i, &bits, sizeof bits);
            } else {
                float f;
                std::memcpy(&f, &bits, sizeof f);
                dst[i] = static_cast<T>(f);
            }
        } else {
            const std::uint64_t bits = load_le(p, 8);
            if constexpr (std::is_same_v<T, double>) {
                std::memcpy(dst + i, &bits, sizeof bits);
            } else {
                double d;
                std::memcpy(&d, &bits, sizeof d);
                dst[i] = narrow<T>(d);
            }
        }
    }
    return -1;
}

template <class T>
void encode(const T* src, Index count, unsigned char* dst) {
    for (Index i = 0; i < count; ++i) {
        unsigned char* p = dst + static_cast<std::size_t>(i) * sizeof(T);
        if constexpr (std::is_same_v<T, bool>) {
            *p = src[i] ? 1 : 0;
        } else if constexpr (std::is_same_v<T, float>) {
            std::uint32_t bits;
            std::memcpy(&bits, &src[i], sizeof bits);
            store_le(bits, p, 4);
        } else {
            std::uint64_t bits;
            std::memcpy(&bits, &src[i], sizeof bits);
            store_le(bits, p, 8);
        }
    }
}

/// "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }" padded, as numpy writes it.
inline std::string make_header(Dtype dtype, const Shape& shape) {
    std::string dict =
        std::string("{'descr': '") + descr_of(dtype) + "', 'fortran_order': False, 'shape': (";
    for (int a = 0; a < shape.rank(); ++a) {
        if (a) dict += ", ";
        dict += std::to_string(shape[a]);
    }
    dict += shape.rank() == 1 ? ",), }" : "), }";
    // Spaces, then a newline, so magic + version + length + header is a multiple of 64 bytes:
    // the data then starts aligned, as NumPy's own writer arranges.
    const std::size_t unpadded = kMagicSize + 2 + 2 + dict.size() + 1;
    dict.append((kAlignment - unpadded % kAlignment) % kAlignment, ' ');
    dict += '\n';
    return dict;
}

inline bool is_file_name(const std::string& key) {
    return !key.empty() && key != "." && key != ".." && key.find('/') == std::string::npos &&
           key.find('\\') == std::string::npos;
}

/// save_npy with the writer that puts bytes into the file as a parameter, so that a test can
/// make a save fail part way.
template <class T, class Write>
void save(const std::string& path, TensorView<const T> tensor, Write write) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bool>,
                  "headwise::save_npy saves tensors of float, double or bool");
    constexpr const char* kFunction = "headwise::save_npy";

    const std::string header = make_header(dtype_of<T>(), tensor.shape());
    const auto length = static_cast<std::uint16_t>(header.size());
    HEADWISE_ASSERT(header.size() <= 0xffff);  // rank <= Shape::kMaxRank keeps it ~200 bytes
    const char prefix[] = {kMagic[0],
                           kMagic[1],
                           kMagic[2],
                           kMagic[3],
                           kMagic[4],
                           kMagic[5],
                           1,
                           0,
                           static_cast<char>(length & 0xffu),
                           static_cast<char>(length >> 8)};
    ::headwise::detail::AtomicFile<Write> out(kFunction, path, std::move(write));
    out.write(prefix, sizeof prefix);
    out.write(header.data(), header.size());

    const Index per_chunk = static_cast<Index>(kChunkBytes / sizeof(T));
    std::vector<unsigned char> buffer(
        static_cast<std::size_t>(std::min(per_chunk, tensor.numel())) * sizeof(T));
    for (Index done = 0; done < tensor.numel();) {
        const Index count = std::min(per_chunk, tensor.numel() - done);
        encode(tensor.data() + done, count, buffer.data());
        out.write(buffer.data(), static_cast<std::size_t>(count) * sizeof(T));
        done += count;
    }
    out.commit();
}

}  // namespace headwise::io::detail::npy
