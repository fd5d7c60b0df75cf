// SPDX-License-Identifier: MIT
// Reading and writing safetensors weight files (F32, F64; BF16 and F16 read), header via
// nlohmann/json.
#pragma once

#if !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/io/safetensors.hpp needs nlohmann/json (Debian: nlohmann-json3-dev; CMake: \
find_package(nlohmann_json) before headwise, or link nlohmann_json::nlohmann_json)"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>    // std::sort
#include <cmath>        // std::ldexp
#include <cstdint>      // std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t
#include <cstring>      // std::memcpy
#include <fstream>      // std::ifstream, std::ofstream
#include <ios>          // std::ios, std::streamsize
#include <iterator>     // std::istreambuf_iterator
#include <limits>       // std::numeric_limits
#include <map>          // std::map
#include <stdexcept>    // std::runtime_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v, std::conditional_t
#include <utility>      // std::move
#include <vector>       // std::vector

#include "../config.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise::io {

// ---- declarations ----------------------------------------------------------------------------

/// Loads every tensor of a safetensors file (https://github.com/huggingface/safetensors: an
/// 8-byte little-endian header length N, N bytes of JSON {"name": {"dtype", "shape",
/// "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data). F32 and F64 tensors
/// load into either scalar type; BF16 and F16 are converted. Validation is strict and checked
/// before anything is returned: the header length within the file, well-formed JSON, every entry
/// an object with a known dtype, a shape of non-negative integers, data_offsets in range with a
/// byte count equal to numel * the dtype's size, entries neither overlapping nor leaving gaps.
/// Any problem throws std::runtime_error whose what() names the function, the file and the entry:
///   "headwise::io::load_safetensors: model.safetensors: entry 'linear1.weight': data_offsets
///    [0, 60] hold 60 bytes, but F32 [4, 4] needs 64"
template <class T>
std::map<std::string, Tensor<T>> load_safetensors(const std::string& path);

/// The entries whose names start with `prefix` (e.g. "encoder.layers.0."), with the prefix
/// removed, so that a sub-module's load_state_dict() takes them as they are. The whole file is
/// validated all the same.
template <class T>
std::map<std::string, Tensor<T>> load_safetensors(const std::string& path,
                                                  const std::string& prefix);

/// The same from a file's bytes in memory; `name` stands for the file in error messages.
template <class T>
std::map<std::string, Tensor<T>> parse_safetensors(const std::uint8_t* data, std::size_t size,
                                                   const std::string& name = "<memory>",
                                                   const std::string& prefix = "");

/// Writes `tensors` as a safetensors file (F32 for float, F64 for double), entries in name
/// order, the header padded with spaces to a multiple of 8 bytes, optional string `metadata`
/// under "__metadata__". Throws std::invalid_argument for an empty name or one that is
/// "__metadata__", std::runtime_error naming the file when writing fails.
template <class T>
void save_safetensors(const std::string& path, const std::map<std::string, Tensor<T>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// ---- definitions -----------------------------------------------------------------------------

namespace detail::safetensors {

/// The safetensors reference implementation's header limit (100 MB).
inline constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

enum class Dtype { f32, f64, bf16, f16 };

inline std::size_t item_size(Dtype d) { return d == Dtype::f64 ? 8 : d == Dtype::f32 ? 4 : 2; }

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

/// Element i of a little-endian buffer of dtype d, as double.
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
        const nlohmann::json header = nlohmann::json::parse(text, text + n, nullptr, false);
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
        else if (d == "BOOL" || d == "U8" || d == "I8" || d == "I16" || d == "U16" || d == "I32" ||
                 d == "U32" || d == "I64" || d == "U64" || d == "F8_E4M3" || d == "F8_E5M2")
            fail(key, "dtype " + d + " is not supported (F32, F64, BF16, F16 are)");
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
                fail(key, "shape holds " + s.dump() + ", not a non-negative integer");
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
        for (const nlohmann::json& o : *offsets)
            if (!o.is_number_unsigned())
                fail(key, "data_offsets hold " + o.dump() + ", not a non-negative integer");
        e.begin = (*offsets)[0].get<std::uint64_t>();
        e.end = (*offsets)[1].get<std::uint64_t>();
        if (e.begin > e.end) fail(key, "data_offsets " + range(e) + " end before they begin");
        if (e.end > data_size)
            fail(key, "data_offsets " + range(e) + " run past the " + std::to_string(data_size) +
                          " bytes of data");
        const std::uint64_t item = item_size(e.dtype);
        if (overflow || numel > std::numeric_limits<std::uint64_t>::max() / item ||
            numel * item != e.end - e.begin)
            fail(key,
                 "data_offsets " + range(e) + " hold " + std::to_string(e.end - e.begin) +
                     " bytes, but " + d + " " + shape_str + " needs " +
                     (overflow ? std::string("more than 2^64") : std::to_string(numel * item)));
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
        for (Index i = 0; i < t.numel(); ++i)
            t.data()[i] = static_cast<T>(element(p + static_cast<std::size_t>(i) * item, e.dtype));
        out.emplace(e.name.substr(prefix.size()), std::move(t));
    }
    return out;
}

template <class T>
std::map<std::string, Tensor<T>> load(const std::string& path, const std::string& prefix) {
    constexpr const char* fn = "headwise::io::load_safetensors";
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(std::string(fn) + ": " + path + ": cannot open the file");
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                          std::istreambuf_iterator<char>());
    if (in.bad()) throw std::runtime_error(std::string(fn) + ": " + path + ": read error");
    return parse<T>(fn, bytes.data(), bytes.size(), path, prefix);
}

}  // namespace detail::safetensors

template <class T>
std::map<std::string, Tensor<T>> load_safetensors(const std::string& path) {
    return detail::safetensors::load<T>(path, "");
}

template <class T>
std::map<std::string, Tensor<T>> load_safetensors(const std::string& path,
                                                  const std::string& prefix) {
    return detail::safetensors::load<T>(path, prefix);
}

template <class T>
std::map<std::string, Tensor<T>> parse_safetensors(const std::uint8_t* data, std::size_t size,
                                                   const std::string& name,
                                                   const std::string& prefix) {
    return detail::safetensors::parse<T>("headwise::io::parse_safetensors", data, size, name,
                                         prefix);
}

template <class T>
void save_safetensors(const std::string& path, const std::map<std::string, Tensor<T>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "headwise::io::save_safetensors: save float or double tensors");
    constexpr const char* fn = "headwise::io::save_safetensors";
    nlohmann::json header = nlohmann::json::object();
    std::uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        if (name.empty() || name == "__metadata__")
            throw std::invalid_argument(std::string(fn) + ": " + path + ": entry '" + name +
                                        "': not a valid tensor name");
        const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * sizeof(T);
        header[name] = {{"dtype", sizeof(T) == 8 ? "F64" : "F32"},
                        {"shape", t.shape().to_vector()},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(std::string(fn) + ": " + path + ": cannot open for writing");
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& entry : tensors) {
        const Tensor<T>& t = entry.second;
        for (Index i = 0; i < t.numel(); ++i) {  // little-endian whatever the host's order
            using Bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
            Bits bits;
            std::memcpy(&bits, t.data() + i, sizeof bits);
            unsigned char b[sizeof(T)];
            for (std::size_t k = 0; k < sizeof(T); ++k)
                b[k] = static_cast<unsigned char>(bits >> (8 * k));
            out.write(reinterpret_cast<const char*>(b), sizeof(T));
        }
    }
    out.flush();
    if (!out) throw std::runtime_error(std::string(fn) + ": " + path + ": write failed");
}

}  // namespace headwise::io
