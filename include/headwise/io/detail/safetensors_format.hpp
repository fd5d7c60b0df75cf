// SPDX-License-Identifier: MIT
// The safetensors format behind io/safetensors.hpp: dtypes and their conversions, the validating
// header reader (bounded depth, no duplicates, offsets checked) and the atomic writer.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>     // std::sort
#include <cmath>         // std::ldexp
#include <cstdint>       // std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t
#include <cstring>       // std::memcpy, std::memchr
#include <filesystem>    // std::filesystem::is_directory, is_regular_file, exists
#include <fstream>       // std::ifstream
#include <ios>           // std::ios, std::ios_base::failure
#include <limits>        // std::numeric_limits
#include <map>           // std::map
#include <memory>        // std::unique_ptr
#include <set>           // std::set
#include <stdexcept>     // std::runtime_error, std::invalid_argument
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code
#include <type_traits>   // std::is_same_v, std::conditional_t
#include <utility>       // std::move
#include <vector>        // std::vector

#if __has_include(<sys/mman.h>) && __has_include(<sys/stat.h>) && __has_include(<fcntl.h>) && \
    __has_include(<unistd.h>)
#include <fcntl.h>     // ::open, O_RDONLY, O_CLOEXEC
#include <sys/mman.h>  // ::mmap, ::munmap
#include <sys/stat.h>  // ::fstat, S_ISREG
#include <unistd.h>    // ::close
#define HEADWISE_SAFETENSORS_MMAP 1
#else
#define HEADWISE_SAFETENSORS_MMAP 0
#endif

#include "../../config.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "atomic_file.hpp"
#include "file_kind.hpp"

namespace headwise::io::detail::safetensors {

/// The safetensors reference implementation's header limit (100 MB).
inline constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

/// The deepest nesting of arrays and objects a header may have. A valid header needs 3 (the
/// header, an entry, its shape); the margin lets the entry checks say what is wrong with a
/// malformed value, and the bound keeps every value shallow enough to print, since printing
/// recurses once per level.
inline constexpr int kMaxDepth = 16;

/// The offset of the first byte of `s` that does not belong to well-formed UTF-8 (RFC 3629: no
/// overlong forms, no surrogates, nothing above U+10FFFF), or std::string::npos.
inline std::size_t invalid_utf8_at(const std::string& s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            ++i;
            continue;
        }
        // Continuation bytes are 0x80..0xBF; the lead byte narrows the range of the first one.
        std::size_t more = 0;
        unsigned char low = 0x80, high = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) low = 0xA0;   // overlong below U+0800
            if (c == 0xED) high = 0x9F;  // UTF-16 surrogates U+D800..U+DFFF
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) low = 0x90;   // overlong below U+10000
            if (c == 0xF4) high = 0x8F;  // above U+10FFFF
        } else {
            return i;
        }
        if (s.size() - i - 1 < more) return i;
        for (std::size_t k = 1; k <= more; ++k) {
            const auto b = static_cast<unsigned char>(s[i + k]);
            if (b < (k == 1 ? low : 0x80) || b > (k == 1 ? high : 0xBF)) return i;
        }
        i += more + 1;
    }
    return std::string::npos;
}

enum class Dtype { f32, f64, bf16, f16, i8, u8, i16, u16, i32, u32, i64, u64, boolean };

inline std::size_t item_size(Dtype d) {
    switch (d) {
        case Dtype::f64:
        case Dtype::i64:
        case Dtype::u64:
            return 8;
        case Dtype::f32:
        case Dtype::i32:
        case Dtype::u32:
            return 4;
        case Dtype::bf16:
        case Dtype::f16:
        case Dtype::i16:
        case Dtype::u16:
            return 2;
        case Dtype::i8:
        case Dtype::u8:
        case Dtype::boolean:
            return 1;
    }
    return 1;
}

inline bool is_integer(Dtype d) { return d >= Dtype::i8; }
inline bool is_signed_integer(Dtype d) {
    return d == Dtype::i8 || d == Dtype::i16 || d == Dtype::i32 || d == Dtype::i64;
}

/// IEEE half (binary16) bits to float: normal, subnormal, zero, infinity and NaN.
inline float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    float value;
    if (exponent == 0)
        value = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal (or zero)
    else if (exponent == 31)
        value = mantissa ? std::numeric_limits<float>::quiet_NaN()
                         : std::numeric_limits<float>::infinity();
    else
        value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
    return sign ? -value : value;
}

/// bfloat16 bits to float: they are the top half of the float's bits.
inline float bfloat16_to_float(std::uint16_t b) {
    const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

inline std::uint64_t load_le(const std::uint8_t* p, std::size_t bytes) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    return v;
}

/// Element i of a little-endian buffer of floating-point dtype d, as double (integer dtypes are
/// read by integer_element, which checks that T holds them exactly).
inline double element(const std::uint8_t* p, Dtype d) {
    switch (d) {
        case Dtype::f64: {
            const std::uint64_t bits = load_le(p, 8);
            double v;
            std::memcpy(&v, &bits, sizeof v);
            return v;
        }
        case Dtype::f32: {
            const std::uint32_t bits = static_cast<std::uint32_t>(load_le(p, 4));
            float v;
            std::memcpy(&v, &bits, sizeof v);
            return static_cast<double>(v);
        }
        case Dtype::bf16:
            return static_cast<double>(
                bfloat16_to_float(static_cast<std::uint16_t>(load_le(p, 2))));
        case Dtype::f16:
            return static_cast<double>(half_to_float(static_cast<std::uint16_t>(load_le(p, 2))));
        default:
            break;
    }
    return 0.0;
}

struct Entry {
    std::string name;
    Dtype dtype = Dtype::f32;
    Shape shape;
    std::uint64_t begin = 0, end = 0;
};

class Reader {
public:
    Reader(const char* function, const std::string& file) : function_(function), file_(file) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error(std::string(function_) + ": " + file_ + ": " + what);
    }
    [[noreturn]] void fail(const std::string& entry, const std::string& what) const {
        fail("entry '" + printable(entry) + "': " + what);
    }

    /// Parses and validates the header; returns the entries sorted by offset and the data start.
    std::vector<Entry> parse(const std::uint8_t* data, std::size_t size, std::size_t& data_start) {
        // A file of another kind (a PyTorch checkpoint, a .npy, ...) would otherwise be read as
        // a header length of some 10^17 bytes: it is named, with what to do instead.
        const std::string foreign = ::headwise::detail::foreign_file_message(
            ::headwise::detail::file_kind(data, size, size),
            ::headwise::detail::FileKind::safetensors, file_);
        if (!foreign.empty()) fail(foreign);
        if (size < 8)
            fail("file of " + std::to_string(size) +
                 " bytes is too short for the 8-byte header length");
        const std::uint64_t n = load_le(data, 8);
        if (n > kMaxHeaderSize)
            fail("header length " + std::to_string(n) + " exceeds the limit of " +
                 std::to_string(kMaxHeaderSize) + " bytes");
        if (n > size - 8)
            fail("header length " + std::to_string(n) + " runs past the end of the file (" +
                 std::to_string(size - 8) + " bytes after the length)");
        data_start = 8 + static_cast<std::size_t>(n);
        const std::uint64_t data_size = size - data_start;
        const char* text = reinterpret_cast<const char*>(data + 8);
        // Writers pad the header with spaces (0x20); JSON whitespace (space, tab, CR, LF) after
        // the object is accepted, as the format's reference reader, a JSON parser, accepts it.
        // nlohmann's parser ends its input at a NUL byte, which would let anything after one
        // pass unread: a NUL is rejected wherever it is.
        std::size_t length = static_cast<std::size_t>(n);
        const auto json_space = [](char c) {
            return c == ' ' || c == '\t' || c == '\n' || c == '\r';
        };
        while (length > 0 && json_space(text[length - 1])) --length;
        if (const void* nul = std::memchr(text, 0, static_cast<std::size_t>(n)))
            fail("header has a NUL byte at offset " +
                 std::to_string(static_cast<const char*>(nul) - text) +
                 " (only JSON whitespace may pad the header after its JSON object)");
        const nlohmann::json header = parse_json(text, text + length);
        if (header.is_discarded()) fail("header is not valid JSON");
        if (!header.is_object()) fail("header is not a JSON object");

        std::vector<Entry> entries;
        for (const auto& item : header.items()) {
            const std::string& key = item.key();
            const nlohmann::json& v = item.value();
            if (key == "__metadata__") {
                if (!v.is_object()) fail(key, "must be an object of strings");
                for (const auto& m : v.items())
                    if (!m.value().is_string())
                        fail(key, "value of '" + printable(m.key()) + "' is not a string");
                continue;
            }
            entries.push_back(parse_entry(key, v, data_size));
        }
        // Sorted by offset, each must start where the previous ended: no overlap, no gap.
        std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
            return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
        });
        std::uint64_t expected = 0;
        for (const Entry& e : entries) {
            if (e.begin < expected)
                fail(e.name, "data_offsets " + range(e) +
                                 " overlap the previous entry's data, "
                                 "which ends at " +
                                 std::to_string(expected));
            if (e.begin > expected)
                fail(e.name, "data_offsets " + range(e) + " leave the bytes [" +
                                 std::to_string(expected) + ", " + std::to_string(e.begin) +
                                 ") unused");
            expected = e.end;
        }
        if (expected != data_size)
            fail("the entries cover " + std::to_string(expected) + " bytes of data, but " +
                 std::to_string(data_size) + " follow the header");
        return entries;
    }

private:
    static std::string range(const Entry& e) {
        return "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    }
    /// At most 80 characters, control and non-ASCII bytes shown as '?'.
    static std::string printable(const std::string& s) {
        std::string out;
        for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7F) ? c : '?';
        return s.size() > 80 ? out + "..." : out;
    }
    /// A JSON value as it would be written, shortened by printable(). parse_json() has bounded
    /// the nesting that dump() recurses through; a long string is cut before it is quoted.
    static std::string printable(const nlohmann::json& v) {
        if (v.is_string())
            return printable("\"" + v.get_ref<const std::string&>().substr(0, 81) + "\"");
        return printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }

    /// Parses the header, rejecting while it parses what nlohmann would accept silently: a name
    /// or key declared twice (the last would win) and nesting beyond kMaxDepth.
    nlohmann::json parse_json(const char* first, const char* last) const {
        using Event = nlohmann::json::parse_event_t;
        std::string entry;                        // the header's key whose value is being parsed
        bool in_entry = false;                    // false until the first key of the header
        std::vector<std::set<std::string>> keys;  // for each open object, the keys seen so far
        const auto check = [&](int depth, Event event, nlohmann::json& parsed) {
            // `depth` counts the arrays and objects open around the value of the event.
            if (event == Event::object_start || event == Event::array_start) {
                if (depth >= kMaxDepth) {
                    const std::string what =
                        "JSON nested deeper than " + std::to_string(kMaxDepth) + " levels";
                    if (in_entry) fail(entry, what);
                    fail(what);
                }
                if (event == Event::object_start) keys.emplace_back();
            } else if (event == Event::object_end) {
                keys.pop_back();
            } else if (event == Event::key) {
                const std::string& key = parsed.get_ref<const std::string&>();
                if (depth == 1) {
                    entry = key;
                    in_entry = true;
                }
                if (!keys.back().insert(key).second) {
                    if (depth == 1) fail(key, "declared twice");
                    fail(entry, "has the key '" + printable(key) + "' twice");
                }
            }
            return true;
        };
        return nlohmann::json::parse(first, last, check, false);
    }

    Entry parse_entry(const std::string& key, const nlohmann::json& v, std::uint64_t data_size) {
        Entry e;
        e.name = key;
        if (key.empty()) fail(key, "the name is empty");
        if (!v.is_object()) fail(key, "is not a JSON object");
        const auto dtype = v.find("dtype");
        const auto shape = v.find("shape");
        const auto offsets = v.find("data_offsets");
        if (dtype == v.end() || !dtype->is_string()) fail(key, "has no string 'dtype'");
        if (shape == v.end() || !shape->is_array()) fail(key, "has no array 'shape'");
        if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2)
            fail(key, "has no 'data_offsets' [begin, end]");

        const std::string d = dtype->get<std::string>();
        if (d == "F32")
            e.dtype = Dtype::f32;
        else if (d == "F64")
            e.dtype = Dtype::f64;
        else if (d == "BF16")
            e.dtype = Dtype::bf16;
        else if (d == "F16")
            e.dtype = Dtype::f16;
        else if (d == "I8")
            e.dtype = Dtype::i8;
        else if (d == "U8")
            e.dtype = Dtype::u8;
        else if (d == "I16")
            e.dtype = Dtype::i16;
        else if (d == "U16")
            e.dtype = Dtype::u16;
        else if (d == "I32")
            e.dtype = Dtype::i32;
        else if (d == "U32")
            e.dtype = Dtype::u32;
        else if (d == "I64")
            e.dtype = Dtype::i64;
        else if (d == "U64")
            e.dtype = Dtype::u64;
        else if (d == "BOOL")
            e.dtype = Dtype::boolean;
        else if (d == "F8_E4M3" || d == "F8_E5M2")
            fail(key, "dtype " + d +
                          " is not supported (F32, F64, BF16, F16 and the integer "
                          "dtypes are)");
        else
            fail(key, "unknown dtype '" + printable(d) + "'");

        if (shape->size() > static_cast<std::size_t>(Shape::kMaxRank))
            fail(key, "shape has rank " + std::to_string(shape->size()) + ", more than " +
                          std::to_string(Shape::kMaxRank));
        std::vector<Index> dims;
        std::uint64_t numel = 1;
        bool overflow = false;
        for (const nlohmann::json& s : *shape) {
            if (!s.is_number_unsigned())
                fail(key, "shape holds " + printable(s) + ", not a non-negative integer");
            const std::uint64_t extent = s.get<std::uint64_t>();
            if (extent > static_cast<std::uint64_t>(std::numeric_limits<Index>::max()))
                fail(key, "shape extent " + std::to_string(extent) + " is too large");
            dims.push_back(static_cast<Index>(extent));
            if (extent != 0 && numel > std::numeric_limits<std::uint64_t>::max() / extent)
                overflow = true;
            else
                numel *= extent;
        }
        // The Shape is built once the data size matches: a Shape must be countable in Index,
        // which an absurd header's extents need not be.
        std::string shape_str = "[";
        for (std::size_t i = 0; i < dims.size(); ++i)
            shape_str += (i ? ", " : "") + std::to_string(dims[i]);
        shape_str += "]";
        const std::uint64_t item = item_size(e.dtype);
        if (overflow || numel > std::numeric_limits<std::uint64_t>::max() / item)
            fail(key, "the byte count of " + d + " " + shape_str + " overflows 64 bits");
        for (const nlohmann::json& o : *offsets)
            if (!o.is_number_unsigned())
                fail(key, "data_offsets hold " + printable(o) + ", not a non-negative integer");
        e.begin = (*offsets)[0].get<std::uint64_t>();
        e.end = (*offsets)[1].get<std::uint64_t>();
        if (e.begin > e.end) fail(key, "data_offsets " + range(e) + " end before they begin");
        if (e.end > data_size)
            fail(key, "data_offsets " + range(e) + " run past the " + std::to_string(data_size) +
                          " bytes of data");
        if (numel * item != e.end - e.begin)
            fail(key, "data_offsets " + range(e) + " hold " + std::to_string(e.end - e.begin) +
                          " bytes, but " + d + " " + shape_str + " needs " +
                          std::to_string(numel * item));
        Index nonzero = 1;  // a zero extent leaves no data, but the others must stay countable
        for (const Index x : dims)
            if (x != 0 && __builtin_mul_overflow(nonzero, x, &nonzero))
                fail(key, "shape " + shape_str + " has more elements than an Index can count");
        e.shape = Shape(dims);
        return e;
    }

    const char* function_;
    std::string file_;
};

/// Element i (at p) of the integer entry e as T; throws through `reader` naming the entry, the
/// index and the value when T cannot hold it exactly (or a BOOL byte is neither 0 nor 1).
template <class T>
T integer_element(const Reader& reader, const Entry& e, const std::uint8_t* p, Index i) {
    const std::size_t item = item_size(e.dtype);
    const std::uint64_t raw = load_le(p, item);
    const char* type = std::is_same_v<T, float> ? "float" : "double";
    constexpr double two63 = 9223372036854775808.0, two64 = 18446744073709551616.0;
    if (e.dtype == Dtype::boolean) {
        if (raw > 1)
            reader.fail(e.name, "BOOL element " + std::to_string(i) + " is the byte " +
                                    std::to_string(raw) + ", expected 0 or 1");
        return static_cast<T>(raw);
    }
    if (is_signed_integer(e.dtype)) {
        const unsigned shift = static_cast<unsigned>(64 - 8 * item);
        // Sign-extends the item's bits: shift them to the top, then back arithmetically.
        const auto v = static_cast<std::int64_t>(raw << shift) >> shift;
        const T t = static_cast<T>(v);
        if (!(static_cast<double>(t) < two63) || static_cast<std::int64_t>(t) != v)
            reader.fail(e.name, "element " + std::to_string(i) + " (" + std::to_string(v) +
                                    ") is not exactly representable in " + type);
        return t;
    }
    const T t = static_cast<T>(raw);
    if (!(static_cast<double>(t) < two64) || static_cast<std::uint64_t>(t) != raw)
        reader.fail(e.name, "element " + std::to_string(i) + " (" + std::to_string(raw) +
                                ") is not exactly representable in " + type);
    return t;
}

template <class T>
std::map<std::string, Tensor<T>> parse(const char* function, const std::uint8_t* data,
                                       std::size_t size, const std::string& file,
                                       const std::string& prefix) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "headwise::io::load_safetensors: load into float or double");
    Reader reader(function, file);
    std::size_t start = 0;
    const std::vector<Entry> entries = reader.parse(data, size, start);
    std::map<std::string, Tensor<T>> out;
    for (const Entry& e : entries) {
        if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
        Tensor<T> t = Tensor<T>::uninitialized(e.shape);  // the entry's shape
        const std::uint8_t* p = data + start + e.begin;
        const std::size_t item = item_size(e.dtype);
        if (e.dtype == (std::is_same_v<T, float> ? Dtype::f32 : Dtype::f64)) {
            // The bits as they are: a value passed through a conversion (even float to double
            // and back) may come out with its NaN quieted. On a little-endian host the file's
            // bytes are T's bytes, so the entry is one copy.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            if (t.numel() > 0)
                std::memcpy(t.data(), p, static_cast<std::size_t>(t.numel()) * sizeof(T));
#else
            using Bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
            for (Index i = 0; i < t.numel(); ++i) {
                const auto bits =
                    static_cast<Bits>(load_le(p + static_cast<std::size_t>(i) * item, item));
                std::memcpy(t.data() + i, &bits, sizeof bits);
            }
#endif
        } else if (is_integer(e.dtype)) {
            for (Index i = 0; i < t.numel(); ++i)
                t.data()[i] =
                    integer_element<T>(reader, e, p + static_cast<std::size_t>(i) * item, i);
        } else {
            for (Index i = 0; i < t.numel(); ++i)
                t.data()[i] =
                    static_cast<T>(element(p + static_cast<std::size_t>(i) * item, e.dtype));
        }
        out.emplace(e.name.substr(prefix.size()), std::move(t));
    }
    return out;
}

template <class T>
std::map<std::string, Tensor<T>> load(const std::string& path, const std::string& prefix) {
    constexpr const char* fn = "headwise::io::load_safetensors";
    const auto fail = [&](const std::string& what) {
        throw std::runtime_error(std::string(fn) + ": " + path + ": " + what);
    };
    // Checked first: reading a directory fails inside the stream with a message that names
    // neither, and a device such as /dev/zero never ends.
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail("is a directory");
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
        fail("is not a regular file");
#if HEADWISE_SAFETENSORS_MMAP
    // Mapped rather than read where the system can: the page cache's pages are the bytes, with
    // no copy into a buffer. (Another process truncating the file during the load would fault;
    // a file being rewritten is not a checkpoint to load anyway, and saves here are atomic.)
    if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
        struct stat st {};
        void* mapped = MAP_FAILED;
        std::size_t length = 0;
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
            length = static_cast<std::size_t>(st.st_size);
            int flags = MAP_PRIVATE;
#ifdef MAP_POPULATE
            flags |= MAP_POPULATE;  // one call maps every page, rather than a fault each
#endif
            mapped = ::mmap(nullptr, length, PROT_READ, flags, fd, 0);
        }
        ::close(fd);
        if (mapped != MAP_FAILED) {
            struct Unmap {
                void* p;
                std::size_t n;
                ~Unmap() { ::munmap(p, n); }
            } unmap{mapped, length};
            return parse<T>(fn, static_cast<const std::uint8_t*>(mapped), length, path, prefix);
        }
    }
#endif
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open the file");
    // One read of the whole file: its size from the end position, then the bytes, into a
    // buffer left unwritten before the read (zeroing 100 MB first costs as much as the read).
    std::unique_ptr<std::uint8_t[]> bytes;
    std::streamoff size = 0;
    try {
        in.seekg(0, std::ios::end);
        size = in.tellg();
        if (size < 0) fail("cannot tell the file's size");
        in.seekg(0, std::ios::beg);
        bytes.reset(new std::uint8_t[static_cast<std::size_t>(size) + 1]);
        if (size > 0) in.read(reinterpret_cast<char*>(bytes.get()), size);
        if (in.gcount() != size)
            fail("read " + std::to_string(in.gcount()) + " of the file's " + std::to_string(size) +
                 " bytes");
    } catch (const std::ios_base::failure& e) {
        fail(std::string("read error (") + e.what() + ")");
    }
    if (in.bad()) fail("read error");
    return parse<T>(fn, bytes.get(), static_cast<std::size_t>(size), path, prefix);
}

template <class T, class Write>
void save(const std::string& path, const std::map<std::string, Tensor<T>>& tensors,
          const std::map<std::string, std::string>& metadata, Write write) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "headwise::io::save_safetensors: save float or double tensors");
    constexpr const char* fn = "headwise::io::save_safetensors";
    const auto reject = [&](const std::string& what) {
        throw std::invalid_argument(std::string(fn) + ": " + path + ": " + what);
    };
    const auto quote = [](const std::string& s) {  // at most 80 bytes, as the reader's messages
        std::string out;
        for (const char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7F) ? c : '?';
        return "'" + (s.size() > 80 ? out + "..." : out) + "'";
    };
    // Everything is checked before the file is touched; nlohmann's dump() would otherwise throw
    // its own type_error for a string that is not UTF-8.
    for (const auto& entry : tensors) {
        const std::string& name = entry.first;
        if (name.empty() || name == "__metadata__")
            reject("entry " + quote(name) + ": not a valid tensor name");
        const std::size_t bad = invalid_utf8_at(name);
        if (bad != std::string::npos)
            reject("entry " + quote(name) + ": the name is not valid UTF-8 (byte " +
                   std::to_string(bad) + ")");
    }
    for (const auto& [key, value] : metadata) {
        std::size_t bad = invalid_utf8_at(key);
        if (bad != std::string::npos)
            reject("metadata " + quote(key) + ": the key is not valid UTF-8 (byte " +
                   std::to_string(bad) + ")");
        bad = invalid_utf8_at(value);
        if (bad != std::string::npos)
            reject("metadata " + quote(key) + ": the value is not valid UTF-8 (byte " +
                   std::to_string(bad) + ")");
    }

    nlohmann::json header = nlohmann::json::object();
    std::uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * sizeof(T);
        header[name] = {{"dtype", sizeof(T) == 8 ? "F64" : "F32"},
                        {"shape", t.shape().to_vector()},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

    ::headwise::detail::AtomicFile<Write> out(fn, path, std::move(write));
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
    out.write(length, 8);
    out.write(text.data(), text.size());
    using Bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
    for (const auto& entry : tensors) {
        const Tensor<T>& t = entry.second;
        for (Index i = 0; i < t.numel(); ++i) {  // little-endian whatever the host's order
            Bits bits;
            std::memcpy(&bits, t.data() + i, sizeof bits);
            unsigned char b[sizeof(T)];
            for (std::size_t k = 0; k < sizeof(T); ++k)
                b[k] = static_cast<unsigned char>(bits >> (8 * k));
            out.write(b, sizeof(T));
        }
    }
    out.commit();
}

}  // namespace headwise::io::detail::safetensors
