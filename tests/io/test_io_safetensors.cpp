// SPDX-License-Identifier: MIT
// Tests of headwise/io/safetensors.hpp: round trips, every dtype read, prefixes, and the strict
// validation of malformed files (messages asserted word for word).
#include <headwise/io/safetensors.hpp>

#include <algorithm>   // std::min, std::sort
#include <cerrno>      // errno, ENOSPC
#include <cmath>       // std::isinf
#include <cstddef>     // std::size_t, std::ptrdiff_t
#include <cstdint>     // std::uint8_t, std::uint32_t, std::uint64_t
#include <cstring>     // std::memcpy, std::memcmp
#include <filesystem>  // std::filesystem::exists, is_empty, directory_iterator
#include <fstream>     // std::ifstream, std::ofstream
#include <iterator>    // std::istreambuf_iterator
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error, std::invalid_argument
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/failing_writes.hpp"
#include "support/golden.hpp"
#include "support/match.hpp"

namespace test_io_safetensors {

using namespace headwise;
using headwise::test::FillingDevice;
using headwise::test::listing;
using headwise::test::ScratchDir;

namespace {

/// A file image: 8-byte little-endian length, the header text, then `data_bytes` zero bytes.
std::vector<std::uint8_t> image(const std::string& header, std::size_t data_bytes,
                                std::uint64_t length_override = ~std::uint64_t{0}) {
    const std::uint64_t n = length_override == ~std::uint64_t{0} ? header.size() : length_override;
    std::vector<std::uint8_t> bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.insert(bytes.end(), data_bytes, 0);
    return bytes;
}

std::string error_of(const std::vector<std::uint8_t>& bytes) {
    try {
        io::parse_safetensors<float>(bytes.data(), bytes.size(), "m.safetensors");
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "no error";
}

const std::string kFn = "headwise::io::parse_safetensors: m.safetensors: ";

}  // namespace

TEMPLATE_TEST_CASE("save_safetensors then load_safetensors gives the tensors back bit for bit",
                   "[io][safetensors]", float, double) {
    using T = TestType;
    Generator rng(3);
    std::map<std::string, Tensor<T>> sd;
    sd.emplace("encoder.layers.0.linear1.weight", Tensor<T>::randn(Shape{4, 3}, rng));
    sd.emplace("encoder.layers.0.linear1.bias", Tensor<T>::randn(Shape{4}, rng));
    sd.emplace("encoder.layers.1.norm1.weight", Tensor<T>::randn(Shape{3}, rng));
    sd.emplace("scalar", Tensor<T>(Shape{}, {T(2.5)}));
    sd.emplace("empty", Tensor<T>(Shape{0, 3}));
    const ScratchDir dir("safetensors");
    io::save_safetensors(dir.file("m.safetensors"), sd, {{"format", "pt"}});
    const auto back = io::load_safetensors<T>(dir.file("m.safetensors"));
    REQUIRE(back.size() == sd.size());
    for (const auto& [name, t] : sd) {
        CAPTURE(name);
        CHECK(test::identical(back.at(name), t));
    }
    // The other scalar type converts on load.
    using U = std::conditional_t<std::is_same_v<T, float>, double, float>;
    const auto other = io::load_safetensors<U>(dir.file("m.safetensors"));
    HEADWISE_CHECK_CLOSE(other.at("encoder.layers.0.linear1.weight"),
                         sd.at("encoder.layers.0.linear1.weight"), 1e-7);
    // By prefix: only that sub-module's entries, the prefix removed.
    const auto layer0 = io::load_safetensors<T>(dir.file("m.safetensors"), "encoder.layers.0.");
    REQUIRE(layer0.size() == 2);
    CHECK(test::identical(layer0.at("linear1.bias"), sd.at("encoder.layers.0.linear1.bias")));
}

TEST_CASE("F16, BF16, F32 and F64 entries read as the exact values", "[io][safetensors]") {
    const std::string path = (test::golden_dir() / "safetensors" / "dtypes.safetensors").string();
    const auto sd = io::load_safetensors<double>(path);
    // The expected.x.* twins are F64 themselves, so F64 is checked first against values known
    // without the reader: the generator writes i / 7 (correctly rounded in Python and C++ alike)
    // and the bit patterns below, which tests/golden/make_safetensors_golden.py lists as well.
    for (const char* name : {"x.F64", "expected.x.F64"}) {
        CAPTURE(name);
        const Tensor<double>& x = sd.at(name);
        REQUIRE(x.shape() == Shape{2, 5});
        for (Index i = 0; i < x.numel(); ++i) CHECK(x.data()[i] == static_cast<double>(i) / 7.0);
    }
    const std::uint64_t bits_f64[] = {0x3FC2492492492492, 0x8000000000000000, 0x0000000000000001,
                                      0x7FEFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF0000000000001,
                                      0xFFF8000000000001, 0x7FF7FFFFFFFFFFFF};
    const std::uint32_t bits_f32[] = {0x3E124925, 0x80000000, 0x00000001, 0x7F7FFFFF,
                                      0x7F800000, 0x7F800001, 0xFFC00001, 0x7FBFFFFF};
    const auto f = io::load_safetensors<float>(path);
    REQUIRE(sd.at("bits.F64").shape() == Shape{8});
    REQUIRE(f.at("bits.F32").shape() == Shape{8});
    for (Index i = 0; i < 8; ++i) {
        CAPTURE(i);
        std::uint64_t b64;
        std::memcpy(&b64, sd.at("bits.F64").data() + i, 8);
        CHECK(b64 == bits_f64[i]);
        std::uint32_t b32;
        std::memcpy(&b32, f.at("bits.F32").data() + i, 4);
        CHECK(b32 == bits_f32[i]);
    }
    std::uint64_t seventh;
    std::memcpy(&seventh, sd.at("x.F64").data() + 1, 8);
    CHECK(seventh == bits_f64[0]);  // 1 / 7

    for (const char* dtype : {"F16", "BF16", "F32"}) {
        CAPTURE(dtype);
        const Tensor<double>& x = sd.at(std::string("x.") + dtype);
        const Tensor<double>& expected = sd.at(std::string("expected.x.") + dtype);
        REQUIRE(x.shape() == expected.shape());
        for (Index i = 0; i < x.numel(); ++i) CHECK(x.data()[i] == expected.data()[i]);
    }
    for (Index i = 0; i < 10; ++i)  // F32 of i / 7: the double rounded once to float
        CHECK(f.at("x.F32").data()[i] == static_cast<float>(static_cast<double>(i) / 7.0));
    CHECK(std::isinf(f.at("x.F16").data()[8]));
    CHECK(f.at("x.F16").data()[7] == 5.960464477539063e-08f);  // the smallest subnormal half
}

TEST_CASE("integer and BOOL entries load as T when exactly representable", "[io][safetensors]") {
    // An int64 buffer as PyTorch checkpoints hold (BERT's embeddings.position_ids), then the
    // other integer dtypes, each with its extreme values, little-endian.
    const std::string header = R"({"ids":{"dtype":"I64","shape":[1,4],"data_offsets":[0,32]},)"
                               R"("i8":{"dtype":"I8","shape":[2],"data_offsets":[32,34]},)"
                               R"("u8":{"dtype":"U8","shape":[1],"data_offsets":[34,35]},)"
                               R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[35,37]},)"
                               R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[37,39]},)"
                               R"("u16":{"dtype":"U16","shape":[1],"data_offsets":[39,41]},)"
                               R"("i32":{"dtype":"I32","shape":[1],"data_offsets":[41,45]},)"
                               R"("u32":{"dtype":"U32","shape":[1],"data_offsets":[45,49]},)"
                               R"("u64":{"dtype":"U64","shape":[1],"data_offsets":[49,57]}})";
    std::vector<std::uint8_t> bytes = image(header, 57);
    std::uint8_t* d = bytes.data() + 8 + header.size();
    const auto put = [](std::uint8_t* p, std::uint64_t v, int n) {
        for (int i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
    };
    const std::int64_t ids[4] = {0, 1, -2, (std::int64_t{1} << 24)};
    for (int i = 0; i < 4; ++i) put(d + 8 * i, static_cast<std::uint64_t>(ids[i]), 8);
    put(d + 32, 0x80, 1);                    // I8 -128
    put(d + 33, 0x7F, 1);                    // I8 127
    put(d + 34, 0xFF, 1);                    // U8 255
    put(d + 35, 0, 1);                       // BOOL false
    put(d + 36, 1, 1);                       // BOOL true
    put(d + 37, 0x8000, 2);                  // I16 -32768
    put(d + 39, 0xFFFF, 2);                  // U16 65535
    put(d + 41, 0xFFFFFFFF, 4);              // I32 -1
    put(d + 45, 0x01000000, 4);              // U32 2^24
    put(d + 49, std::uint64_t{1} << 63, 8);  // U64 2^63: a power of two, exact in float
    const auto sd = io::parse_safetensors<float>(bytes.data(), bytes.size(), "m.safetensors");
    REQUIRE(sd.at("ids").shape() == Shape{1, 4});
    CHECK(sd.at("ids").data()[2] == -2.0f);
    CHECK(sd.at("ids").data()[3] == 16777216.0f);
    CHECK(sd.at("i8").data()[0] == -128.0f);
    CHECK(sd.at("i8").data()[1] == 127.0f);
    CHECK(sd.at("u8").data()[0] == 255.0f);
    CHECK(sd.at("b").data()[0] == 0.0f);
    CHECK(sd.at("b").data()[1] == 1.0f);
    CHECK(sd.at("i16").data()[0] == -32768.0f);
    CHECK(sd.at("u16").data()[0] == 65535.0f);
    CHECK(sd.at("i32").data()[0] == -1.0f);
    CHECK(sd.at("u32").data()[0] == 16777216.0f);
    CHECK(sd.at("u64").data()[0] == 9223372036854775808.0f);

    // 2^24 + 1 has no float, but a double: the error names the entry, the element and the value.
    put(d + 8 * 3, (std::uint64_t{1} << 24) + 1, 8);
    CHECK(error_of(bytes) == kFn +
                                 "entry 'ids': element 3 (16777217) is not exactly "
                                 "representable in float");
    CHECK(io::parse_safetensors<double>(bytes.data(), bytes.size()).at("ids").data()[3] ==
          16777217.0);
    put(d + 8 * 3, 7, 8);
    put(d + 36, 2, 1);
    CHECK(error_of(bytes) == kFn + "entry 'b': BOOL element 1 is the byte 2, expected 0 or 1");
    put(d + 36, 1, 1);
    put(d + 49, ~std::uint64_t{0}, 8);  // 2^64 - 1 rounds to 2^64 in float and in double
    CHECK(error_of(bytes) == kFn +
                                 "entry 'u64': element 0 (18446744073709551615) is not "
                                 "exactly representable in float");
}

TEST_CASE("malformed safetensors files throw errors naming the file and the entry",
          "[io][safetensors][errors]") {
    const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    CHECK(error_of(image(ok, 8)) == "no error");
    CHECK(error_of(std::vector<std::uint8_t>(5, 0)) ==
          kFn + "file of 5 bytes is too short for the 8-byte header length");
    CHECK(error_of(image(ok, 8, 1000)) ==
          kFn + "header length 1000 runs past the end of the file (62 bytes after the length)");
    CHECK(error_of(image(ok, 8, ~std::uint64_t{0} - 1)) ==
          kFn + "header length 18446744073709551614 exceeds the limit of 100000000 bytes");
    CHECK(error_of(image(R"({"a":{"dtype":"F32",)", 8)) == kFn + "header is not valid JSON");
    CHECK(error_of(image("[1, 2]", 0)) == kFn + "header is not a JSON object");
    CHECK(error_of(image(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8)) ==
          kFn + "entry 'a': unknown dtype 'Q7'");
    CHECK(error_of(image(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1)) ==
          kFn +
              "entry 'a': dtype F8_E4M3 is not supported (F32, F64, BF16, F16 and the integer "
              "dtypes are)");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8)) ==
          kFn + "entry 'a': data_offsets [0, 16] run past the 8 bytes of data");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)) ==
          kFn + "entry 'a': data_offsets [0, 8] hold 8 bytes, but F32 [3] needs 12");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8)) ==
          kFn +
              "entry 'b': data_offsets [4, 8] overlap the previous entry's data, which ends "
              "at 8");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)) ==
          kFn + "entry 'a': data_offsets [4, 8] leave the bytes [0, 4) unused");
    CHECK(error_of(image(ok, 12)) ==
          kFn + "the entries cover 8 bytes of data, but 12 follow the header");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)) ==
          kFn + "entry 'a': shape holds -2, not a non-negative integer");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)) ==
          kFn + "entry 'a': data_offsets [8, 0] end before they begin");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[2]}})", 8)) ==
          kFn + "entry 'a': has no 'data_offsets' [begin, end]");
    CHECK(error_of(image(R"({"a":[1]})", 0)) == kFn + "entry 'a': is not a JSON object");
    CHECK(error_of(image(R"({"__metadata__":{"k":1}})", 0)) ==
          kFn + "entry '__metadata__': value of 'k' is not a string");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],)"
                         R"("data_offsets":[0,8]}})",
                         8)) ==
          kFn +
              "entry 'a': the byte count of F32 [4294967296, 4294967296, 4294967296] overflows "
              "64 bits");
    CHECK_THROWS_MATCHES(io::load_safetensors<float>("/nonexistent/x.safetensors"),
                         std::runtime_error,
                         Message("headwise::io::load_safetensors: /nonexistent/x.safetensors: "
                                 "cannot open the file"));
}

TEST_CASE("a header nested 100,000 deep is rejected with a short message",
          "[io][safetensors][errors]") {
    // 200 KB of brackets, far under the header limit: an error message that printed the value
    // recursively overflowed the stack.
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,0]}})",
                         0)) == kFn + "entry 'a': JSON nested deeper than 16 levels");
    CHECK(error_of(image(R"({"__metadata__":{"k":)" + deep + "}}", 0)) ==
          kFn + "entry '__metadata__': JSON nested deeper than 16 levels");
    CHECK(error_of(image(deep, 0)) == kFn + "JSON nested deeper than 16 levels");
    // Up to the limit the usual checks speak.
    const std::string sixteen = std::string(14, '[') + std::string(14, ']');
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":)" + sixteen + R"(,"data_offsets":[0,0]}})",
                         0)) ==
          kFn + "entry 'a': shape holds [[[[[[[[[[[[[]]]]]]]]]]]]], not a non-negative integer");
    const std::string seventeen = std::string(15, '[') + std::string(15, ']');
    CHECK(error_of(image(
              R"({"a":{"dtype":"F32","shape":)" + seventeen + R"(,"data_offsets":[0,0]}})", 0)) ==
          kFn + "entry 'a': JSON nested deeper than 16 levels");
}

TEST_CASE("no error message echoes more than a few hundred bytes of the file",
          "[io][safetensors][errors]") {
    const std::string mb(1 << 20, 'x');
    const std::string quoted = "\"" + mb + "\"";
    const std::vector<std::string> headers = {
        R"({"a":{"dtype":)" + quoted + R"(,"shape":[2],"data_offsets":[0,8]}})",
        R"({"a":{"dtype":"F32","shape":[)" + quoted + R"(],"data_offsets":[0,8]}})",
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[)" + quoted + R"(,8]}})",
        R"({"a":{"dtype":"F32","shape":[[)" + std::string(1 << 20, '1') +
            R"(]],"data_offsets":[0,8]}})",
        "{" + quoted + R"(:{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
        R"({"__metadata__":{"k":[)" + quoted + "]}}",
        R"({"__metadata__":{)" + quoted + ":1}}",
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],)" + quoted + ":" + quoted + "}," +
            quoted + ":" + quoted + "}",
    };
    for (std::size_t i = 0; i < headers.size(); ++i) {
        CAPTURE(i);
        const std::string message = error_of(image(headers[i], 8));
        CHECK(message.compare(0, kFn.size(), kFn) == 0);
        CHECK(message.size() < kFn.size() + 250);
    }
    CHECK(
        error_of(image(headers[1], 8)) ==
        kFn +
            "entry 'a': shape holds \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            "xxxxxxxxxxxxxxxxxxx..., not a non-negative integer");
}

TEST_CASE("only JSON whitespace may follow the header's JSON object", "[io][safetensors][errors]") {
    const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    CHECK(error_of(image(ok + "      ", 8)) == "no error");   // the format's padding
    CHECK(error_of(image(ok + " \n\t\r", 8)) == "no error");  // JSON whitespace, as a JSON reader
    CHECK(error_of(image(ok + std::string("\0garbage", 8), 8)) ==
          kFn +
              "header has a NUL byte at offset 54 (only JSON whitespace may pad the header after "
              "its JSON object)");
    CHECK(error_of(image(ok + std::string("  \0\0\0\0", 6), 8)) ==
          kFn +
              "header has a NUL byte at offset 56 (only JSON whitespace may pad the header after "
              "its JSON object)");
    CHECK(error_of(image(ok + std::string("\0   ", 4), 8)) ==
          kFn +
              "header has a NUL byte at offset 54 (only JSON whitespace may pad the header after "
              "its JSON object)");
    CHECK(error_of(image(ok + " x", 8)) == kFn + "header is not valid JSON");
    CHECK(error_of(image(ok + "\v", 8)) == kFn + "header is not valid JSON");
}

TEST_CASE("a name declared twice is rejected, naming it", "[io][safetensors][errors]") {
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                         8)) == kFn + "entry 'a': declared twice");
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8)) == kFn + "entry 'a': declared twice");
    CHECK(error_of(image(R"({"a":{"dtype":"F64","shape":[1],"dtype":"F32","data_offsets":[0,8]}})",
                         8)) == kFn + "entry 'a': has the key 'dtype' twice");
    CHECK(error_of(image(R"({"__metadata__":{"k":"1","k":"2"}})", 0)) ==
          kFn + "entry '__metadata__': has the key 'k' twice");
    CHECK(error_of(image(R"({"__metadata__":{},"__metadata__":{}})", 0)) ==
          kFn + "entry '__metadata__': declared twice");
}

TEST_CASE("a shape whose byte count overflows says so", "[io][safetensors][errors]") {
    // 2^62 + 1 elements of 4 bytes: the product wraps to 4, which matched the offsets.
    CHECK(error_of(image(R"({"a":{"dtype":"F32","shape":[4611686018427387905],)"
                         R"("data_offsets":[0,4]}})",
                         4)) ==
          kFn + "entry 'a': the byte count of F32 [4611686018427387905] overflows 64 bits");
    CHECK(error_of(image(R"({"a":{"dtype":"F64","shape":[2305843009213693952, 4],)"
                         R"("data_offsets":[0,0]}})",
                         0)) ==
          kFn + "entry 'a': the byte count of F64 [2305843009213693952, 4] overflows 64 bits");
}

TEST_CASE("loading a directory names the function and the path", "[io][safetensors][errors]") {
    const ScratchDir dir("safetensors-directory");
    const std::string path = dir.path().string();
    CHECK_THROWS_MATCHES(io::load_safetensors<float>(path), std::runtime_error,
                         Message("headwise::io::load_safetensors: " + path + ": is a directory"));
    CHECK_THROWS_MATCHES(io::load_safetensors<float>(path, "encoder."), std::runtime_error,
                         Message("headwise::io::load_safetensors: " + path + ": is a directory"));
}

TEST_CASE("NaN payloads and signalling NaNs load and save bit for bit", "[io][safetensors]") {
    // F32: a signalling NaN (quiet bit clear), a negative quiet NaN with a payload, the largest
    // signalling payload, a quiet NaN with a payload; F64 likewise.
    const std::vector<std::uint32_t> f32 = {0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0x7fc12345u};
    const std::vector<std::uint64_t> f64 = {0x7ff0000000000001ull, 0xfff8000000000001ull,
                                            0x7ff7ffffffffffffull, 0x7ff8123456789abcull};
    std::string data;
    for (const std::uint32_t b : f32)
        for (int k = 0; k < 4; ++k) data += static_cast<char>(b >> (8 * k));
    for (const std::uint64_t b : f64)
        for (int k = 0; k < 8; ++k) data += static_cast<char>(b >> (8 * k));
    std::string header = R"({"d":{"dtype":"F64","shape":[4],"data_offsets":[16,48]},)"
                         R"("f":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
    std::vector<std::uint8_t> bytes = image(header, 0);
    bytes.insert(bytes.end(), data.begin(), data.end());

    const auto as_float = io::parse_safetensors<float>(bytes.data(), bytes.size());
    const auto as_double = io::parse_safetensors<double>(bytes.data(), bytes.size());
    for (std::size_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        std::uint32_t b32;
        std::memcpy(&b32, as_float.at("f").data() + i, 4);
        CHECK(b32 == f32[i]);
        std::uint64_t b64;
        std::memcpy(&b64, as_double.at("d").data() + i, 8);
        CHECK(b64 == f64[i]);
    }

    const ScratchDir dir("safetensors-nan");
    io::save_safetensors(dir.file("f.safetensors"),
                         std::map<std::string, Tensor<float>>{{"f", as_float.at("f")}});
    io::save_safetensors(dir.file("d.safetensors"),
                         std::map<std::string, Tensor<double>>{{"d", as_double.at("d")}});
    const auto tail = [](const std::string& path, std::size_t n) {
        std::ifstream in(path, std::ios::binary);
        const std::string all((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
        return all.substr(all.size() - n);
    };
    CHECK(tail(dir.file("f.safetensors"), 16) == data.substr(0, 16));
    CHECK(tail(dir.file("d.safetensors"), 32) == data.substr(16));
    const auto back = io::load_safetensors<float>(dir.file("f.safetensors"));
    CHECK(std::memcmp(back.at("f").data(), data.data(), 16) == 0);
}

TEST_CASE("save_safetensors rejects names and metadata that are not UTF-8, writing nothing",
          "[io][safetensors][errors]") {
    const ScratchDir dir("safetensors-utf8");
    const std::string path = dir.file("m.safetensors");
    const std::string fn = "headwise::io::save_safetensors: " + path + ": ";
    const std::map<std::string, Tensor<float>> bad_name{{"w\xff", Tensor<float>(Shape{2})}};
    CHECK_THROWS_MATCHES(io::save_safetensors(path, bad_name), std::invalid_argument,
                         Message(fn + "entry 'w?': the name is not valid UTF-8 (byte 1)"));
    const std::map<std::string, Tensor<float>> ok{{"w", Tensor<float>(Shape{2})}};
    CHECK_THROWS_MATCHES(io::save_safetensors(path, ok, {{"k", "caf\xc3"}}), std::invalid_argument,
                         Message(fn + "metadata 'k': the value is not valid UTF-8 (byte 3)"));
    CHECK_THROWS_MATCHES(io::save_safetensors(path, ok, {{"\xed\xa0\x80", "v"}}),
                         std::invalid_argument,
                         Message(fn + "metadata '" + std::string(3, '?') +
                                 "': the key is not valid UTF-8 (byte 0)"));
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK(std::filesystem::is_empty(dir.path()));
    // Well-formed UTF-8 of every length saves and loads.
    const std::string name = "w.\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    io::save_safetensors(path,
                         std::map<std::string, Tensor<float>>{{name, Tensor<float>(Shape{2})}},
                         {{"k", "\xe2\x82\xac"}});
    CHECK(io::load_safetensors<float>(path).count(name) == 1);
}

namespace {

std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::map<std::string, Tensor<float>> some_weights(std::uint64_t seed, Index n) {
    Generator rng(seed);
    std::map<std::string, Tensor<float>> sd;
    sd.emplace("w", Tensor<float>::randn(Shape{n, 3}, rng));
    sd.emplace("b", Tensor<float>::randn(Shape{n}, rng));
    return sd;
}

}  // namespace

TEST_CASE("a save that fails part way leaves the previous file byte-identical",
          "[io][safetensors][atomic]") {
    const ScratchDir dir("safetensors-atomic");
    const std::string path = dir.file("m.safetensors");
    io::save_safetensors(path, some_weights(1, 4));
    const std::string before = file_bytes(path);
    // Larger than the saver's 64 KiB buffer, so that some data reaches the disk before it fails.
    const auto next = some_weights(2, 10000);
    for (const std::size_t budget :
         {std::size_t{0}, std::size_t{100}, std::size_t{70000}, std::size_t{159999}}) {
        CAPTURE(budget);
        CHECK_THROWS_MATCHES(
            io::detail::safetensors::save(path, next, {}, FillingDevice{budget, 4096}),
            std::runtime_error,
            Message("headwise::io::save_safetensors: " + path + ": write failed after " +
                    std::to_string(budget) +
                    " bytes (No space left on device); the file is "
                    "unchanged"));
        CHECK(file_bytes(path) == before);
        CHECK(listing(dir.path()) == std::vector<std::string>{"m.safetensors"});
    }
    // Short writes alone are no failure: the same bytes as a save in one piece.
    io::detail::safetensors::save(path, next, {}, FillingDevice{~std::size_t{0}, 1000});
    const std::string written = file_bytes(path);
    io::save_safetensors(dir.file("direct.safetensors"), next);
    CHECK(written == file_bytes(dir.file("direct.safetensors")));
    CHECK(written.size() > 160000);
}

TEST_CASE("a save that cannot start says why and leaves no temporary file",
          "[io][safetensors][atomic]") {
    const ScratchDir dir("safetensors-unwritable");
    const std::string missing = (dir.path() / "no_such_dir" / "m.safetensors").string();
    CHECK_THROWS_MATCHES(io::save_safetensors(missing, some_weights(1, 2)), std::runtime_error,
                         Message("headwise::io::save_safetensors: " + missing +
                                 ": cannot open for writing (creating a temporary file beside "
                                 "it: No such file or directory)"));
    const std::string directory = dir.file("sub");
    std::filesystem::create_directory(directory);
    CHECK_THROWS_MATCHES(
        io::save_safetensors(directory, some_weights(1, 2)), std::runtime_error,
        Message("headwise::io::save_safetensors: " + directory + ": is a directory"));
    CHECK(listing(dir.path()) == std::vector<std::string>{"sub"});
    CHECK(std::filesystem::is_empty(directory));
}

TEST_CASE("a successful save replaces the file and keeps its permissions",
          "[io][safetensors][atomic]") {
    const ScratchDir dir("safetensors-replace");
    const std::string path = dir.file("m.safetensors");
    io::save_safetensors(path, some_weights(1, 4));
    namespace fs = std::filesystem;
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
    const auto next = some_weights(2, 5);
    io::save_safetensors(path, next);
    const auto back = io::load_safetensors<float>(path);
    REQUIRE(back.size() == 2);
    CHECK(test::identical(back.at("w"), next.at("w")));
    CHECK(test::identical(back.at("b"), next.at("b")));
    CHECK(fs::status(path).permissions() ==
          (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
    CHECK(listing(dir.path()) == std::vector<std::string>{"m.safetensors"});
}

}  // namespace test_io_safetensors
