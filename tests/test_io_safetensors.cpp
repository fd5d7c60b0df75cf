// SPDX-License-Identifier: MIT
// Tests of headwise/io/safetensors.hpp: round trips, every dtype read, prefixes, and the strict
// validation of malformed files (messages asserted word for word).
#include <headwise/io/safetensors.hpp>

#include <cmath>      // std::isinf
#include <cstdint>    // std::uint8_t
#include <fstream>    // std::ofstream
#include <map>        // std::map
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/match.hpp"

using namespace headwise;
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
    for (const char* dtype : {"F16", "BF16", "F32", "F64"}) {
        CAPTURE(dtype);
        const Tensor<double>& x = sd.at(std::string("x.") + dtype);
        const Tensor<double>& expected = sd.at(std::string("expected.x.") + dtype);
        REQUIRE(x.shape() == expected.shape());
        for (Index i = 0; i < x.numel(); ++i) CHECK(x.data()[i] == expected.data()[i]);
    }
    const auto f = io::load_safetensors<float>(path);
    CHECK(std::isinf(f.at("x.F16").data()[8]));
    CHECK(f.at("x.F16").data()[7] == 5.960464477539063e-08f);  // the smallest subnormal half
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
    CHECK(error_of(image(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8)) ==
          kFn + "entry 'a': dtype I64 is not supported (F32, F64, BF16, F16 are)");
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
              "entry 'a': data_offsets [0, 8] hold 8 bytes, but F32 [4294967296, 4294967296, "
              "4294967296] needs more than 2^64");
    CHECK_THROWS_MATCHES(io::load_safetensors<float>("/nonexistent/x.safetensors"),
                         std::runtime_error,
                         Message("headwise::io::load_safetensors: /nonexistent/x.safetensors: "
                                 "cannot open the file"));
}
