// SPDX-License-Identifier: MIT
// GgufValue: one metadata value of a GGUF file (an integer, float, bool, string, or an array of
// any of these, arrays of arrays included), as read and as written.
#pragma once

#include <cstdint>      // std::uint8_t ... std::uint64_t, std::int8_t ... std::int64_t
#include <cstring>      // std::memcpy
#include <stdexcept>    // std::invalid_argument, std::out_of_range
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <utility>      // std::move
#include <vector>       // std::vector

namespace headwise::io {

// ---- declarations ----------------------------------------------------------------------------

/// GGUF's value types, with the numbers files store (gguf_type in llama.cpp's gguf.h).
enum class GgufValueType : std::uint32_t {
    uint8 = 0,
    int8 = 1,
    uint16 = 2,
    int16 = 3,
    uint32 = 4,
    int32 = 5,
    float32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    uint64 = 10,
    int64 = 11,
    float64 = 12,
};

/// "UINT8", "INT8", ..., "ARRAY", ..., "FLOAT64"; "unknown" for a number GGUF does not define.
const char* gguf_value_type_name(GgufValueType type) noexcept;

/// Bytes of one value of a scalar type in a file (1, 2, 4 or 8); 0 for STRING, ARRAY and
/// numbers GGUF does not define.
std::size_t gguf_scalar_size(GgufValueType type) noexcept;

/// One metadata value. Made by the factories below (the writer's input) or by the reader; read
/// back with the accessors, which check the type and throw std::invalid_argument naming the
/// accessor, the type wanted and the type held. Values compare equal when their types and bits
/// are (a NaN equals the same NaN).
class GgufValue {
public:
    GgufValue() = default;  // UINT8 0

    static GgufValue uint8(std::uint8_t v) { return scalar(GgufValueType::uint8, v); }
    static GgufValue int8(std::int8_t v) { return scalar(GgufValueType::int8, bits_of(v)); }
    static GgufValue uint16(std::uint16_t v) { return scalar(GgufValueType::uint16, v); }
    static GgufValue int16(std::int16_t v) { return scalar(GgufValueType::int16, bits_of(v)); }
    static GgufValue uint32(std::uint32_t v) { return scalar(GgufValueType::uint32, v); }
    static GgufValue int32(std::int32_t v) { return scalar(GgufValueType::int32, bits_of(v)); }
    static GgufValue uint64(std::uint64_t v) { return scalar(GgufValueType::uint64, v); }
    static GgufValue int64(std::int64_t v) { return scalar(GgufValueType::int64, bits_of(v)); }
    static GgufValue float32(float v) { return scalar(GgufValueType::float32, bits_of(v)); }
    static GgufValue float64(double v) { return scalar(GgufValueType::float64, bits_of(v)); }
    static GgufValue boolean(bool v) { return scalar(GgufValueType::boolean, v ? 1 : 0); }
    static GgufValue string(std::string v);

    /// An array of `element_type` values (possibly empty); throws std::invalid_argument when an
    /// element has another type.
    static GgufValue array(GgufValueType element_type, std::vector<GgufValue> elements);
    /// An array of scalars or strings from a vector: T is one of std::uint8_t, std::int8_t,
    /// ..., std::int64_t, float, double, bool or std::string.
    template <class T>
    static GgufValue array_of(const std::vector<T>& values);

    GgufValueType type() const noexcept { return type_; }
    bool is_array() const noexcept { return type_ == GgufValueType::array; }
    /// The type of an array's elements; throws for a value that is not an array.
    GgufValueType element_type() const;
    /// The number of an array's elements; throws for a value that is not an array.
    std::size_t size() const;
    /// Element i of an array; throws std::out_of_range for i >= size().
    GgufValue operator[](std::size_t i) const;

    /// The value of any unsigned integer type, or of a signed one that is not negative.
    std::uint64_t as_uint() const;
    /// The value of any integer type that fits in int64.
    std::int64_t as_int() const;
    /// The value of a FLOAT32 or FLOAT64.
    double as_float() const;
    bool as_bool() const;
    const std::string& as_string() const;
    /// The elements of an array whose element type is exactly T's (UINT32 for std::uint32_t,
    /// FLOAT32 for float, STRING for std::string, ...).
    template <class T>
    std::vector<T> to_vector() const;

    friend bool operator==(const GgufValue& a, const GgufValue& b) noexcept;
    friend bool operator!=(const GgufValue& a, const GgufValue& b) noexcept { return !(a == b); }

    /// For the reader: an array of scalars from its elements' little-endian bytes, and the
    /// bits of a scalar (zero-extended).
    static GgufValue scalar_array(GgufValueType element_type, std::string bytes);
    /// Both throw std::invalid_argument for a type that is not a scalar one (or bytes that are
    /// no whole number of elements), so that every GgufValue is well-formed.
    static GgufValue scalar(GgufValueType type, std::uint64_t bits) {
        const std::size_t size = gguf_scalar_size(type);
        if (size == 0)
            throw std::invalid_argument(std::string("headwise::io::GgufValue::scalar: ") +
                                        gguf_value_type_name(type) + " is not a scalar type");
        if (type == GgufValueType::boolean && bits > 1)
            throw std::invalid_argument("headwise::io::GgufValue::scalar: a BOOL is 0 or 1, not " +
                                        std::to_string(bits));
        GgufValue v;
        v.type_ = type;
        v.bits_ = size == 8 ? bits : bits & ((std::uint64_t{1} << (8 * size)) - 1);
        return v;
    }
    /// The raw bits of a scalar; the element bytes of an array of scalars.
    std::uint64_t bits() const noexcept { return bits_; }
    const std::string& bytes() const noexcept { return text_; }
    const std::vector<GgufValue>& items() const noexcept { return items_; }

private:
    template <class U>
    static std::uint64_t bits_of(U v) {
        if constexpr (std::is_same_v<U, float>) {
            std::uint32_t b;
            std::memcpy(&b, &v, sizeof b);
            return b;
        } else if constexpr (std::is_same_v<U, double>) {
            std::uint64_t b;
            std::memcpy(&b, &v, sizeof b);
            return b;
        } else {
            // Two's complement bits of the signed value, only the type's width kept.
            return static_cast<std::uint64_t>(v) & (~std::uint64_t{0} >> (64 - 8 * sizeof(U)));
        }
    }
    [[noreturn]] void wrong_type(const char* accessor, const char* wanted) const;
    std::int64_t signed_value() const noexcept;

    GgufValueType type_ = GgufValueType::uint8;
    GgufValueType element_ = GgufValueType::uint8;  // arrays
    std::uint64_t bits_ = 0;                        // scalars; arrays: the element count
    std::string text_;              // STRING; an array of scalars: its elements' bytes
    std::vector<GgufValue> items_;  // an array of strings or arrays
};

// ---- definitions -----------------------------------------------------------------------------

inline const char* gguf_value_type_name(GgufValueType type) noexcept {
    switch (type) {
        case GgufValueType::uint8:
            return "UINT8";
        case GgufValueType::int8:
            return "INT8";
        case GgufValueType::uint16:
            return "UINT16";
        case GgufValueType::int16:
            return "INT16";
        case GgufValueType::uint32:
            return "UINT32";
        case GgufValueType::int32:
            return "INT32";
        case GgufValueType::float32:
            return "FLOAT32";
        case GgufValueType::boolean:
            return "BOOL";
        case GgufValueType::string:
            return "STRING";
        case GgufValueType::array:
            return "ARRAY";
        case GgufValueType::uint64:
            return "UINT64";
        case GgufValueType::int64:
            return "INT64";
        case GgufValueType::float64:
            return "FLOAT64";
    }
    return "unknown";
}

inline std::size_t gguf_scalar_size(GgufValueType type) noexcept {
    switch (type) {
        case GgufValueType::uint8:
        case GgufValueType::int8:
        case GgufValueType::boolean:
            return 1;
        case GgufValueType::uint16:
        case GgufValueType::int16:
            return 2;
        case GgufValueType::uint32:
        case GgufValueType::int32:
        case GgufValueType::float32:
            return 4;
        case GgufValueType::uint64:
        case GgufValueType::int64:
        case GgufValueType::float64:
            return 8;
        case GgufValueType::string:
        case GgufValueType::array:
            break;
    }
    return 0;
}

inline GgufValue GgufValue::string(std::string v) {
    GgufValue out;
    out.type_ = GgufValueType::string;
    out.text_ = std::move(v);
    return out;
}

inline GgufValue GgufValue::scalar_array(GgufValueType element_type, std::string bytes) {
    const std::size_t size = gguf_scalar_size(element_type);
    if (size == 0 || bytes.size() % size != 0)
        throw std::invalid_argument(std::string("headwise::io::GgufValue::scalar_array: ") +
                                    std::to_string(bytes.size()) + " bytes are no array of " +
                                    gguf_value_type_name(element_type) + " values");
    GgufValue out;
    out.type_ = GgufValueType::array;
    out.element_ = element_type;
    out.bits_ = bytes.size() / size;
    out.text_ = std::move(bytes);
    return out;
}

inline GgufValue GgufValue::array(GgufValueType element_type, std::vector<GgufValue> elements) {
    if (gguf_value_type_name(element_type) == std::string("unknown"))
        throw std::invalid_argument("headwise::io::GgufValue::array: element type " +
                                    std::to_string(static_cast<std::uint32_t>(element_type)) +
                                    " is not a GGUF value type (0 to 12)");
    for (std::size_t i = 0; i < elements.size(); ++i)
        if (elements[i].type_ != element_type)
            throw std::invalid_argument(std::string("headwise::io::GgufValue::array: element ") +
                                        std::to_string(i) + " is " +
                                        gguf_value_type_name(elements[i].type_) + ", not " +
                                        gguf_value_type_name(element_type));
    const std::size_t size = gguf_scalar_size(element_type);
    if (size == 0) {
        GgufValue out;
        out.type_ = GgufValueType::array;
        out.element_ = element_type;
        out.bits_ = elements.size();
        out.items_ = std::move(elements);
        return out;
    }
    std::string bytes;
    bytes.reserve(elements.size() * size);
    for (const GgufValue& e : elements)
        for (std::size_t k = 0; k < size; ++k) bytes += static_cast<char>(e.bits_ >> (8 * k));
    return scalar_array(element_type, std::move(bytes));
}

template <class T>
GgufValue GgufValue::array_of(const std::vector<T>& values) {
    std::vector<GgufValue> elements;
    elements.reserve(values.size());
    GgufValueType type;
    for (const T& v : values) {
        if constexpr (std::is_same_v<T, std::uint8_t>)
            elements.push_back(uint8(v));
        else if constexpr (std::is_same_v<T, std::int8_t>)
            elements.push_back(int8(v));
        else if constexpr (std::is_same_v<T, std::uint16_t>)
            elements.push_back(uint16(v));
        else if constexpr (std::is_same_v<T, std::int16_t>)
            elements.push_back(int16(v));
        else if constexpr (std::is_same_v<T, std::uint32_t>)
            elements.push_back(uint32(v));
        else if constexpr (std::is_same_v<T, std::int32_t>)
            elements.push_back(int32(v));
        else if constexpr (std::is_same_v<T, std::uint64_t>)
            elements.push_back(uint64(v));
        else if constexpr (std::is_same_v<T, std::int64_t>)
            elements.push_back(int64(v));
        else if constexpr (std::is_same_v<T, float>)
            elements.push_back(float32(v));
        else if constexpr (std::is_same_v<T, double>)
            elements.push_back(float64(v));
        else if constexpr (std::is_same_v<T, bool>)
            elements.push_back(boolean(v));
        else if constexpr (std::is_same_v<T, std::string>)
            elements.push_back(string(v));
        else
            static_assert(sizeof(T) == 0,
                          "headwise::io::GgufValue::array_of: T must be a "
                          "GGUF scalar type (std::uint8_t ... std::int64_t, "
                          "float, double, bool) or std::string");
    }
    if constexpr (std::is_same_v<T, std::uint8_t>)
        type = GgufValueType::uint8;
    else if constexpr (std::is_same_v<T, std::int8_t>)
        type = GgufValueType::int8;
    else if constexpr (std::is_same_v<T, std::uint16_t>)
        type = GgufValueType::uint16;
    else if constexpr (std::is_same_v<T, std::int16_t>)
        type = GgufValueType::int16;
    else if constexpr (std::is_same_v<T, std::uint32_t>)
        type = GgufValueType::uint32;
    else if constexpr (std::is_same_v<T, std::int32_t>)
        type = GgufValueType::int32;
    else if constexpr (std::is_same_v<T, std::uint64_t>)
        type = GgufValueType::uint64;
    else if constexpr (std::is_same_v<T, std::int64_t>)
        type = GgufValueType::int64;
    else if constexpr (std::is_same_v<T, float>)
        type = GgufValueType::float32;
    else if constexpr (std::is_same_v<T, double>)
        type = GgufValueType::float64;
    else if constexpr (std::is_same_v<T, bool>)
        type = GgufValueType::boolean;
    else
        type = GgufValueType::string;
    return array(type, std::move(elements));
}

inline void GgufValue::wrong_type(const char* accessor, const char* wanted) const {
    throw std::invalid_argument(std::string("headwise::io::GgufValue::") + accessor +
                                ": the value is " + gguf_value_type_name(type_) + ", not " +
                                wanted);
}

inline GgufValueType GgufValue::element_type() const {
    if (!is_array()) wrong_type("element_type", "ARRAY");
    return element_;
}

inline std::size_t GgufValue::size() const {
    if (!is_array()) wrong_type("size", "ARRAY");
    return static_cast<std::size_t>(bits_);
}

inline GgufValue GgufValue::operator[](std::size_t i) const {
    if (!is_array()) wrong_type("operator[]", "ARRAY");
    if (i >= bits_)
        throw std::out_of_range("headwise::io::GgufValue::operator[]: index " + std::to_string(i) +
                                " of an array of " + std::to_string(bits_) + " elements");
    const std::size_t size = gguf_scalar_size(element_);
    if (size == 0) return items_[i];
    std::uint64_t b = 0;
    for (std::size_t k = 0; k < size; ++k)
        b |= static_cast<std::uint64_t>(static_cast<unsigned char>(text_[i * size + k])) << (8 * k);
    return scalar(element_, b);
}

inline std::int64_t GgufValue::signed_value() const noexcept {
    const std::size_t size = gguf_scalar_size(type_);
    const unsigned shift = static_cast<unsigned>(64 - 8 * size);
    // Sign-extends the type's bits: shifted to the top, then back arithmetically.
    return static_cast<std::int64_t>(bits_ << shift) >> shift;
}

inline std::uint64_t GgufValue::as_uint() const {
    switch (type_) {
        case GgufValueType::uint8:
        case GgufValueType::uint16:
        case GgufValueType::uint32:
        case GgufValueType::uint64:
            return bits_;
        case GgufValueType::int8:
        case GgufValueType::int16:
        case GgufValueType::int32:
        case GgufValueType::int64: {
            const std::int64_t v = signed_value();
            if (v < 0)
                throw std::invalid_argument("headwise::io::GgufValue::as_uint: the " +
                                            std::string(gguf_value_type_name(type_)) + " value " +
                                            std::to_string(v) + " is negative");
            return static_cast<std::uint64_t>(v);
        }
        default:
            break;
    }
    wrong_type("as_uint", "an integer");
}

inline std::int64_t GgufValue::as_int() const {
    switch (type_) {
        case GgufValueType::uint8:
        case GgufValueType::uint16:
        case GgufValueType::uint32:
            return static_cast<std::int64_t>(bits_);
        case GgufValueType::uint64:
            if (bits_ > static_cast<std::uint64_t>(INT64_MAX))
                throw std::invalid_argument("headwise::io::GgufValue::as_int: the UINT64 value " +
                                            std::to_string(bits_) + " exceeds INT64's range");
            return static_cast<std::int64_t>(bits_);
        case GgufValueType::int8:
        case GgufValueType::int16:
        case GgufValueType::int32:
        case GgufValueType::int64:
            return signed_value();
        default:
            break;
    }
    wrong_type("as_int", "an integer");
}

inline double GgufValue::as_float() const {
    if (type_ == GgufValueType::float32) {
        const auto b = static_cast<std::uint32_t>(bits_);
        float f;
        std::memcpy(&f, &b, sizeof f);
        return static_cast<double>(f);
    }
    if (type_ == GgufValueType::float64) {
        double d;
        std::memcpy(&d, &bits_, sizeof d);
        return d;
    }
    wrong_type("as_float", "FLOAT32 or FLOAT64");
}

inline bool GgufValue::as_bool() const {
    if (type_ != GgufValueType::boolean) wrong_type("as_bool", "BOOL");
    return bits_ != 0;
}

inline const std::string& GgufValue::as_string() const {
    if (type_ != GgufValueType::string) wrong_type("as_string", "STRING");
    return text_;
}

template <class T>
std::vector<T> GgufValue::to_vector() const {
    const GgufValue model = [] {
        if constexpr (std::is_same_v<T, std::string>)
            return GgufValue::string("");
        else if constexpr (std::is_same_v<T, bool>)
            return GgufValue::boolean(false);
        else
            return GgufValue::array_of(std::vector<T>{T{}})[0];
    }();
    if (!is_array() || element_ != model.type_) {
        const std::string wanted = std::string("ARRAY of ") + gguf_value_type_name(model.type_);
        if (!is_array()) wrong_type("to_vector", wanted.c_str());
        throw std::invalid_argument(std::string("headwise::io::GgufValue::to_vector: the value "
                                                "is ARRAY of ") +
                                    gguf_value_type_name(element_) + ", not " + wanted);
    }
    std::vector<T> out;
    out.reserve(size());
    for (std::size_t i = 0; i < size(); ++i) {
        const GgufValue e = (*this)[i];
        if constexpr (std::is_same_v<T, std::string>)
            out.push_back(e.text_);
        else if constexpr (std::is_same_v<T, bool>)
            out.push_back(e.bits_ != 0);
        else if constexpr (std::is_same_v<T, float>) {
            const auto b = static_cast<std::uint32_t>(e.bits_);  // the bits, NaNs as they are
            float f;
            std::memcpy(&f, &b, sizeof f);
            out.push_back(f);
        } else if constexpr (std::is_same_v<T, double>) {
            double d;
            std::memcpy(&d, &e.bits_, sizeof d);
            out.push_back(d);
        } else if constexpr (std::is_signed_v<T>)
            out.push_back(static_cast<T>(e.signed_value()));
        else
            out.push_back(static_cast<T>(e.bits_));
    }
    return out;
}

inline bool operator==(const GgufValue& a, const GgufValue& b) noexcept {
    return a.type_ == b.type_ && a.element_ == b.element_ && a.bits_ == b.bits_ &&
           a.text_ == b.text_ && a.items_ == b.items_;
}

}  // namespace headwise::io
