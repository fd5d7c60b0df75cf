// SPDX-License-Identifier: MIT
// Tests of io/npy.hpp: files written by NumPy, round trips, byte-exact output, and every rejection.
#include <headwise/io/npy.hpp>

#include <algorithm>    // std::min, std::sort
#include <cerrno>       // errno, ENOSPC
#include <cmath>        // std::isnan, std::signbit, std::isinf
#include <cstddef>      // std::size_t, std::ptrdiff_t
#include <cstdint>      // std::uint32_t, std::uint64_t
#include <cstring>      // std::memcmp, std::memcpy
#include <filesystem>   // std::filesystem::path, exists, directory_iterator, permissions
#include <fstream>      // std::ifstream, std::ofstream
#include <iterator>     // std::istreambuf_iterator
#include <limits>       // std::numeric_limits
#include <map>          // std::map
#include <stdexcept>    // std::runtime_error, std::invalid_argument
#include <string>       // std::string
#include <type_traits>  // std::conditional_t, std::is_same_v
#include <vector>       // std::vector

#include "support/catch.hpp"
#include "support/failing_writes.hpp"
#include "support/golden.hpp"

namespace test_io_npy {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::test::FillingDevice;
using headwise::test::listing;
using headwise::test::ScratchDir;

namespace {

/// tests/golden/npy/<name>, written by tests/golden/make_npy_golden.py.
std::string fixture(const std::string& name) {
    return (headwise::test::golden_dir() / "npy" / name).string();
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A version 1.0 .npy file from a header dict written by hand (no padding) and raw data bytes.
std::string npy_file(const std::string& dict, const std::string& data) {
    const std::string header = dict + "\n";
    std::string bytes("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    return bytes + header + data;
}

/// The message load_npy gives for a malformed header: the header quoted, its newline as '?'.
std::string malformed(const std::string& path, const std::string& what, std::size_t at,
                      const std::string& dict) {
    return "headwise::load_npy: " + path + ": malformed header: " + what + " at character " +
           std::to_string(at) + " of \"" + dict + "?\"";
}

/// Bitwise equality of every element, which also holds for NaN and tells -0 from 0.
template <class T>
void require_identical(const Tensor<T>& a, const Tensor<T>& b) {
    REQUIRE(a.shape() == b.shape());
    Index first_difference = -1;
    for (Index i = 0; i < a.numel() && first_difference < 0; ++i)
        if (std::memcmp(a.data() + i, b.data() + i, sizeof(T)) != 0) first_difference = i;
    REQUIRE(first_difference == -1);
}

}  // namespace

TEST_CASE("load_npy reads float32 files written by NumPy", "[io][npy]") {
    for (const char* name : {"f4_2x3.npy", "f4_2x3_v3.npy"}) {
        CAPTURE(name);
        const auto f = headwise::load_npy<float>(fixture(name));
        const auto d = headwise::load_npy<double>(fixture(name));  // float32 -> double is exact
        REQUIRE(f.shape() == Shape{2, 3});
        REQUIRE(d.shape() == Shape{2, 3});
        for (Index i = 0; i < 6; ++i) {
            CAPTURE(i);
            REQUIRE(f.data()[i] == (static_cast<float>(i) - 2.5f) / 2.0f);
            REQUIRE(d.data()[i] == (static_cast<double>(i) - 2.5) / 2.0);
        }
    }

    const auto s = headwise::load_npy<float>(fixture("f4_special.npy"));
    REQUIRE(s.shape() == Shape{4});
    REQUIRE(s(0) == std::numeric_limits<float>::max());
    REQUIRE(s(1) == std::numeric_limits<float>::denorm_min());
    REQUIRE(s(2) == -std::numeric_limits<float>::infinity());
    REQUIRE(s(3) == 0.0f);
    REQUIRE(std::signbit(s(3)));
}

TEST_CASE("load_npy reads float64 files written by NumPy, into double or float", "[io][npy]") {
    const auto d = headwise::load_npy<double>(fixture("f8_2x3x4.npy"));
    const auto f = headwise::load_npy<float>(fixture("f8_2x3x4.npy"));
    REQUIRE(d.shape() == Shape{2, 3, 4});
    REQUIRE(f.shape() == Shape{2, 3, 4});
    for (Index i = 0; i < 24; ++i) {
        CAPTURE(i);
        REQUIRE(d.data()[i] == static_cast<double>(i) / 7.0);
        REQUIRE(f.data()[i] == static_cast<float>(static_cast<double>(i) / 7.0));  // rounded once
    }
    REQUIRE(d(1, 2, 3) == 23.0 / 7.0);

    const auto v2 = headwise::load_npy<double>(fixture("f8_2x2_v2.npy"));
    REQUIRE(v2.shape() == Shape{2, 2});
    REQUIRE(v2(1, 1) == 3.0 / 7.0);

    const auto scalar = headwise::load_npy<double>(fixture("f8_scalar.npy"));
    REQUIRE(scalar.shape() == Shape{});
    REQUIRE(scalar.rank() == 0);
    REQUIRE(scalar.numel() == 1);
    REQUIRE(scalar.data()[0] == 3.25);

    const auto empty = headwise::load_npy<double>(fixture("f8_empty.npy"));
    REQUIRE(empty.shape() == Shape{0, 3});
    REQUIRE(empty.numel() == 0);

    const auto s = headwise::load_npy<double>(fixture("f8_special.npy"));
    REQUIRE(s.shape() == Shape{8});
    REQUIRE(s(0) == 0.0);
    REQUIRE_FALSE(std::signbit(s(0)));
    REQUIRE(s(1) == 0.0);
    REQUIRE(std::signbit(s(1)));
    REQUIRE(s(2) == std::numeric_limits<double>::infinity());
    REQUIRE(s(3) == -std::numeric_limits<double>::infinity());
    REQUIRE(std::isnan(s(4)));
    REQUIRE(s(5) == std::numeric_limits<double>::denorm_min());
    REQUIRE(s(6) == std::numeric_limits<double>::max());
    REQUIRE(s(7) == -1.5);

    // Into float: beyond float's range becomes inf (IEEE rounding), tiny values flush to 0.
    const auto sf = headwise::load_npy<float>(fixture("f8_special.npy"));
    REQUIRE(std::isnan(sf(4)));
    REQUIRE(sf(5) == 0.0f);
    REQUIRE(sf(6) == std::numeric_limits<float>::infinity());
    REQUIRE(sf(7) == -1.5f);
}

TEST_CASE("load_npy reads bool files written by NumPy", "[io][npy]") {
    const auto m = headwise::load_npy<bool>(fixture("b1_3x4.npy"));
    REQUIRE(m.shape() == Shape{3, 4});
    for (Index i = 0; i < 3; ++i)
        for (Index j = 0; j < 4; ++j) {
            CAPTURE(i, j);
            REQUIRE(m(i, j) == ((i + j) % 3 == 0));
        }
}

TEST_CASE("read_npy_header reports dtype, order, shape, version and data offset", "[io][npy]") {
    const auto h1 = headwise::read_npy_header(fixture("f8_fortran.npy"));
    REQUIRE(h1.descr == "<f8");
    REQUIRE(h1.fortran_order);
    REQUIRE(h1.shape == Shape{2, 3});
    REQUIRE(h1.major_version == 1);
    REQUIRE(h1.data_offset == 128);

    const auto h2 = headwise::read_npy_header(fixture("f8_2x2_v2.npy"));
    REQUIRE(h2.descr == "<f8");
    REQUIRE_FALSE(h2.fortran_order);
    REQUIRE(h2.major_version == 2);
    REQUIRE(h2.data_offset == 128);

    REQUIRE(headwise::read_npy_header(fixture("b1_3x4.npy")).descr == "|b1");
    REQUIRE(headwise::read_npy_header(fixture("f8_big_endian.npy")).descr == ">f8");
}

TEST_CASE("save_npy writes exactly the bytes NumPy writes", "[io][npy]") {
    ScratchDir dir("test_io_npy-bytes");
    const auto check = [&](const std::string& name, auto loaded) {
        CAPTURE(name);
        const std::string out = dir.file(name);
        headwise::save_npy(out, loaded);
        REQUIRE(read_bytes(out) == read_bytes(fixture(name)));
    };
    check("f4_2x3.npy", headwise::load_npy<float>(fixture("f4_2x3.npy")));
    check("f4_special.npy", headwise::load_npy<float>(fixture("f4_special.npy")));
    check("f8_2x3x4.npy", headwise::load_npy<double>(fixture("f8_2x3x4.npy")));
    check("f8_scalar.npy", headwise::load_npy<double>(fixture("f8_scalar.npy")));
    check("f8_special.npy", headwise::load_npy<double>(fixture("f8_special.npy")));
    check("f8_empty.npy", headwise::load_npy<double>(fixture("f8_empty.npy")));
    check("b1_3x4.npy", headwise::load_npy<bool>(fixture("b1_3x4.npy")));
}

TEMPLATE_TEST_CASE("save_npy and load_npy round-trip ranks 0 to 4", "[io][npy]", float, double) {
    const Shape shape = GENERATE(Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 3, 4}, Shape{2, 1, 3, 2},
                                 Shape{3, 0}, Shape{2, 70000});  // the last spans several chunks
    CAPTURE(shape);
    ScratchDir dir("test_io_npy-roundtrip");
    headwise::Generator rng(7);
    const auto t = Tensor<TestType>::randn(shape, rng);

    const std::string path = dir.file("t.npy");
    headwise::save_npy(path, t);
    require_identical(headwise::load_npy<TestType>(path), t);
    REQUIRE(headwise::read_npy_header(path).shape == shape);

    // Views of either constness save the same file.
    headwise::save_npy(dir.file("view.npy"), t.view());
    headwise::save_npy(dir.file("const_view.npy"), headwise::TensorView<const TestType>(t));
    REQUIRE(read_bytes(dir.file("view.npy")) == read_bytes(path));
    REQUIRE(read_bytes(dir.file("const_view.npy")) == read_bytes(path));

    // The other precision loads with one rounding (exact from float to double).
    using Other = std::conditional_t<std::is_same_v<TestType, float>, double, float>;
    const auto other = headwise::load_npy<Other>(path);
    REQUIRE(other.shape() == shape);
    Index first_difference = -1;
    for (Index i = 0; i < t.numel() && first_difference < 0; ++i)
        if (other.data()[i] != static_cast<Other>(t.data()[i])) first_difference = i;
    REQUIRE(first_difference == -1);
}

TEST_CASE("save_npy and load_npy round-trip bool masks of ranks 0 to 4", "[io][npy]") {
    const Shape shape = GENERATE(Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 3, 4}, Shape{2, 1, 3, 2});
    CAPTURE(shape);
    ScratchDir dir("test_io_npy-roundtrip-bool");
    Tensor<bool> m(shape);
    for (Index i = 0; i < m.numel(); ++i) m.data()[i] = (i * 7) % 3 == 1;
    const std::string path = dir.file("m.npy");
    headwise::save_npy(path, m);
    require_identical(headwise::load_npy<bool>(path), m);
    REQUIRE(headwise::read_npy_header(path).descr == "|b1");
}

TEST_CASE("load_npy rejects files it cannot represent, saying why", "[io][npy]") {
    const std::string big = fixture("f8_big_endian.npy");
    REQUIRE_THROWS_MATCHES(
        headwise::load_npy<double>(big), std::runtime_error,
        Message("headwise::load_npy: " + big +
                ": big-endian data ('>f8') is not supported; save it little-endian, e.g. "
                "np.save(path, a.astype('<f8'))"));

    const std::string fortran = fixture("f8_fortran.npy");
    REQUIRE_THROWS_MATCHES(
        headwise::load_npy<double>(fortran), std::runtime_error,
        Message("headwise::load_npy: " + fortran +
                ": fortran_order is True, but headwise reads C-order (row-major) arrays only; "
                "save np.ascontiguousarray(a) instead"));

    const std::string ints = fixture("i8_vector.npy");
    REQUIRE_THROWS_MATCHES(
        headwise::load_npy<float>(ints), std::runtime_error,
        Message("headwise::load_npy: " + ints +
                ": dtype '<i8' is not supported (headwise reads float32 '<f4', float64 '<f8' "
                "and bool '|b1')"));

    const std::string mask = fixture("b1_3x4.npy");
    REQUIRE_THROWS_MATCHES(headwise::load_npy<float>(mask), std::runtime_error,
                           Message("headwise::load_npy: " + mask +
                                   ": dtype '|b1' (bool) does not load into Tensor<float>; load "
                                   "it as Tensor<bool>"));
    REQUIRE_THROWS_MATCHES(headwise::load_npy<double>(mask), std::runtime_error,
                           Message("headwise::load_npy: " + mask +
                                   ": dtype '|b1' (bool) does not load into Tensor<double>; load "
                                   "it as Tensor<bool>"));

    const std::string values = fixture("f4_2x3.npy");
    REQUIRE_THROWS_MATCHES(headwise::load_npy<bool>(values), std::runtime_error,
                           Message("headwise::load_npy: " + values +
                                   ": dtype '<f4' does not load into Tensor<bool>; masks are "
                                   "stored as '|b1' (np.bool_)"));

    const std::string missing = fixture("no_such_file.npy");
    REQUIRE_THROWS_MATCHES(headwise::load_npy<float>(missing), std::runtime_error,
                           Message("headwise::load_npy: " + missing + ": no such file"));
    const std::string directory = (headwise::test::golden_dir() / "npy").string();
    REQUIRE_THROWS_MATCHES(headwise::load_npy<float>(directory), std::runtime_error,
                           Message("headwise::load_npy: " + directory + ": is a directory"));
    REQUIRE_THROWS_MATCHES(headwise::read_npy_header(missing), std::runtime_error,
                           Message("headwise::read_npy_header: " + missing + ": no such file"));
}

TEST_CASE("load_npy explains corrupted files", "[io][npy]") {
    ScratchDir dir("test_io_npy-corrupt");
    const std::string path = dir.file("bad.npy");
    const std::string f8x3 = std::string(24, '\0');  // three float64 zeros
    const auto load = [&](const std::string& bytes) {
        write_bytes(path, bytes);
        return headwise::load_npy<double>(path);
    };
    const std::string prefix = "headwise::load_npy: " + path + ": ";

    SECTION("not a .npy file") {
        REQUIRE_THROWS_MATCHES(
            load("PK\x03\x04 this is a zip archive"), std::runtime_error,
            Message(prefix + "not a .npy file (it does not start with \"\\x93NUMPY\")"));
        REQUIRE_THROWS_MATCHES(
            load(""), std::runtime_error,
            Message(prefix + "not a .npy file (it does not start with \"\\x93NUMPY\")"));
    }
    SECTION("unknown format version") {
        std::string bytes = read_bytes(fixture("f8_2x3x4.npy"));
        bytes[6] = '\x04';
        REQUIRE_THROWS_MATCHES(
            load(bytes), std::runtime_error,
            Message(prefix +
                    "unsupported .npy format version 4.0 (headwise reads 1.0, 2.0 and 3.0)"));
    }
    SECTION("the file ends inside the header") {
        const std::string bytes = read_bytes(fixture("f8_2x3x4.npy")).substr(0, 60);
        REQUIRE_THROWS_MATCHES(
            load(bytes), std::runtime_error,
            Message(prefix + "file ends inside the header (it announces 118 bytes)"));
        REQUIRE_THROWS_MATCHES(load(bytes.substr(0, 9)), std::runtime_error,
                               Message(prefix + "file ends inside the header length field"));
    }
    SECTION("malformed header dicts") {
        const std::string no_colon = "{'descr' '<f8', 'fortran_order': False, 'shape': (3,), }";
        REQUIRE_THROWS_MATCHES(load(npy_file(no_colon, f8x3)), std::runtime_error,
                               Message(malformed(path, "expected ':'", 9, no_colon)));

        const std::string no_shape = "{'descr': '<f8', 'fortran_order': False, }";
        REQUIRE_THROWS_MATCHES(load(npy_file(no_shape, f8x3)), std::runtime_error,
                               Message(malformed(path, "missing key 'shape'", 43, no_shape)));

        const std::string bad_bool = "{'descr': '<f8', 'fortran_order': Flase, 'shape': (3,), }";
        REQUIRE_THROWS_MATCHES(load(npy_file(bad_bool, f8x3)), std::runtime_error,
                               Message(malformed(path, "expected True or False", 34, bad_bool)));

        const std::string negative = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, -1), }";
        REQUIRE_THROWS_MATCHES(
            load(npy_file(negative, f8x3)), std::runtime_error,
            Message(malformed(path, "expected a non-negative integer extent", 54, negative)));

        const std::string extra = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), 'x': 1}";
        REQUIRE_THROWS_MATCHES(load(npy_file(extra, f8x3)), std::runtime_error,
                               Message(malformed(path, "unknown key 'x'", 56, extra)));

        const std::string twice =
            "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (3,)}";
        REQUIRE_THROWS_MATCHES(load(npy_file(twice, f8x3)), std::runtime_error,
                               Message(malformed(path, "duplicate key 'descr'", 17, twice)));

        const std::string structured =
            "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (3,), }";
        REQUIRE_THROWS_MATCHES(
            load(npy_file(structured, f8x3)), std::runtime_error,
            Message(malformed(path, "expected the dtype string, e.g. '<f4', in quotes", 10,
                              structured)));

        const std::string trailing = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), } x";
        REQUIRE_THROWS_MATCHES(
            load(npy_file(trailing, f8x3)), std::runtime_error,
            Message(malformed(path, "unexpected characters after '}'", 58, trailing)));

        // Bytes after a NUL are read too: only the padding may follow the dict.
        const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
        REQUIRE_THROWS_MATCHES(load(npy_file(dict + std::string("\0garbage", 8), f8x3)),
                               std::runtime_error,
                               Message(malformed(path, "unexpected characters after '}'",
                                                 dict.size(), dict + "?garbage")));
    }
    SECTION("data shorter or longer than the header says") {
        const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
        REQUIRE_THROWS_MATCHES(
            load(npy_file(dict, std::string(16, '\0'))), std::runtime_error,
            Message(prefix + "data is truncated: the header's shape [3] of '<f8' needs 24 bytes, "
                             "the file holds 16"));
        REQUIRE_THROWS_MATCHES(
            load(npy_file(dict, std::string(27, '\0'))), std::runtime_error,
            Message(prefix + "3 unexpected bytes follow the 24 bytes of data the header's shape "
                             "[3] of '<f8' describes"));
        // A header announcing an absurd size fails on the size check, before any allocation.
        const std::string huge =
            "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000,), }";
        REQUIRE_THROWS_MATCHES(
            load(npy_file(huge, f8x3)), std::runtime_error,
            Message(prefix + "data is truncated: the header's shape [100000000000] of '<f8' needs "
                             "800000000000 bytes, the file holds 24"));
    }
    SECTION("a shape whose element count overflows") {
        // The zero extent makes the data size 0, which the file matches; the element count of
        // the other extents still overflows, and every later product would be undefined.
        const std::string dict =
            "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4611686018427387904, "
            "4611686018427387904), }";
        const std::string what = "the product of the extents overflows a 64-bit element count";
        REQUIRE_THROWS_MATCHES(load(npy_file(dict, "")), std::runtime_error,
                               Message(malformed(path, what, dict.find(')'), dict)));
        REQUIRE_THROWS_MATCHES(
            headwise::read_npy_header(path), std::runtime_error,
            Message("headwise::read_npy_header: " + path + ": malformed header: " + what +
                    " at character " + std::to_string(dict.find(')')) + " of \"" + dict + "?\""));
        const std::string wide =
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 2), }";
        REQUIRE_THROWS_MATCHES(load(npy_file(wide, "")), std::runtime_error,
                               Message(malformed(path, what, wide.find(')'), wide)));
        // The element count fits, the byte count does not.
        const std::string bytes =
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693953,), }";
        REQUIRE_THROWS_MATCHES(
            load(npy_file(bytes, f8x3)), std::runtime_error,
            Message(prefix +
                    "the byte count of shape [2305843009213693953] of '<f8' overflows 64 bits"));
    }
    SECTION("bool bytes other than 0 and 1") {
        write_bytes(path, npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                   std::string("\x01\x00\x07", 3)));
        REQUIRE_THROWS_MATCHES(
            headwise::load_npy<bool>(path), std::runtime_error,
            Message(prefix + "element 2 of the '|b1' data is byte 7, not 0 or 1"));
    }
    SECTION("hand-written headers in NumPy's accepted variants load") {
        // Double quotes, other key order, no trailing comma, a Python 2 long extent.
        write_bytes(
            path,
            npy_file("{\"shape\": (3L,), \"fortran_order\": False, \"descr\": \"<f8\"}", f8x3));
        REQUIRE(headwise::load_npy<double>(path).shape() == Shape{3});
        // Fortran order is harmless for rank 1: both orders are the same layout.
        write_bytes(path,
                    npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (3,), }", f8x3));
        REQUIRE(headwise::load_npy<double>(path).shape() == Shape{3});
    }
}

TEST_CASE("save_npy reports a path it cannot write", "[io][npy]") {
    ScratchDir dir("test_io_npy-unwritable");
    const std::string path = (dir.path() / "missing_dir" / "t.npy").string();
    REQUIRE_THROWS_MATCHES(headwise::save_npy(path, Tensor<float>(Shape{2})), std::runtime_error,
                           Message("headwise::save_npy: " + path +
                                   ": cannot open for writing (creating a temporary file beside "
                                   "it: No such file or directory)"));
    const std::string directory = dir.file("sub");
    std::filesystem::create_directory(directory);
    REQUIRE_THROWS_MATCHES(headwise::save_npy(directory, Tensor<float>(Shape{2})),
                           std::runtime_error,
                           Message("headwise::save_npy: " + directory + ": is a directory"));
    REQUIRE(std::filesystem::is_empty(directory));
    REQUIRE(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("a save_npy that fails part way leaves the previous file byte-identical",
          "[io][npy][atomic]") {
    ScratchDir dir("test_io_npy-atomic");
    const std::string path = dir.file("t.npy");
    headwise::Generator rng(5);
    headwise::save_npy(path, Tensor<double>::randn(Shape{3, 4}, rng));
    const std::string before = read_bytes(path);
    const auto next = Tensor<double>::randn(Shape{100, 200}, rng);  // 160 KB: several buffers
    for (const std::size_t budget :
         {std::size_t{0}, std::size_t{64}, std::size_t{100000}, std::size_t{160127}}) {
        CAPTURE(budget);
        REQUIRE_THROWS_MATCHES(
            headwise::io::detail::npy::save<double>(path, next.view(), FillingDevice{budget, 5000}),
            std::runtime_error,
            Message("headwise::save_npy: " + path + ": write failed after " +
                    std::to_string(budget) +
                    " bytes (No space left on device); the file is unchanged"));
        REQUIRE(read_bytes(path) == before);
        REQUIRE(listing(dir.path()) == std::vector<std::string>{"t.npy"});
    }
    // Short writes alone are no failure.
    headwise::io::detail::npy::save<double>(path, next.view(), FillingDevice{~std::size_t{0}, 999});
    require_identical(headwise::load_npy<double>(path), next);
    REQUIRE(read_bytes(path).size() == 160128);
    REQUIRE(listing(dir.path()) == std::vector<std::string>{"t.npy"});
}

TEST_CASE("save_npy replaces the file and keeps its permissions", "[io][npy][atomic]") {
    ScratchDir dir("test_io_npy-replace");
    const std::string path = dir.file("t.npy");
    headwise::save_npy(path, Tensor<float>(Shape{2}));
    namespace fs = std::filesystem;
    const auto perms = fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read;
    fs::permissions(path, perms);
    const Tensor<float> next(Shape{3}, {1.0f, 2.0f, 3.0f});
    headwise::save_npy(path, next);
    require_identical(headwise::load_npy<float>(path), next);
    REQUIRE(fs::status(path).permissions() == perms);
    REQUIRE(listing(dir.path()) == std::vector<std::string>{"t.npy"});
}

TEST_CASE("NaN payloads and signalling NaNs load and save bit for bit in .npy files", "[io][npy]") {
    ScratchDir dir("test_io_npy-nan");
    const std::vector<std::uint32_t> f32 = {0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0x7fc12345u};
    const std::vector<std::uint64_t> f64 = {0x7ff0000000000001ull, 0xfff8000000000001ull,
                                            0x7ff7ffffffffffffull, 0x7ff8123456789abcull};
    std::string data4, data8;
    for (const std::uint32_t b : f32)
        for (int k = 0; k < 4; ++k) data4 += static_cast<char>(b >> (8 * k));
    for (const std::uint64_t b : f64)
        for (int k = 0; k < 8; ++k) data8 += static_cast<char>(b >> (8 * k));
    write_bytes(dir.file("f4.npy"),
                npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", data4));
    write_bytes(dir.file("f8.npy"),
                npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", data8));

    const auto f = headwise::load_npy<float>(dir.file("f4.npy"));
    const auto d = headwise::load_npy<double>(dir.file("f8.npy"));
    for (std::size_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        std::uint32_t b32;
        std::memcpy(&b32, f.data() + i, 4);
        REQUIRE(b32 == f32[i]);
        std::uint64_t b64;
        std::memcpy(&b64, d.data() + i, 8);
        REQUIRE(b64 == f64[i]);
    }
    headwise::save_npy(dir.file("f4_out.npy"), f);
    headwise::save_npy(dir.file("f8_out.npy"), d);
    const std::string out4 = read_bytes(dir.file("f4_out.npy"));
    const std::string out8 = read_bytes(dir.file("f8_out.npy"));
    REQUIRE(out4.substr(out4.size() - 16) == data4);
    REQUIRE(out8.substr(out8.size() - 32) == data8);
}

TEST_CASE("load_npy_dict and save_npy_dict keep PyTorch's state-dict keys", "[io][npy]") {
    ScratchDir dir("test_io_npy-dict");
    headwise::Generator rng(3);
    std::map<std::string, Tensor<double>> sd;
    sd.emplace("in_proj_weight", Tensor<double>::randn(Shape{24, 8}, rng));
    sd.emplace("in_proj_bias", Tensor<double>::randn(Shape{24}, rng));
    sd.emplace("out_proj.weight", Tensor<double>::randn(Shape{8, 8}, rng));
    sd.emplace("out_proj.bias", Tensor<double>::randn(Shape{8}, rng));
    sd.emplace("bias_k", Tensor<double>::randn(Shape{1, 1, 8}, rng));

    const std::string root = (dir.path() / "state").string();  // created by save_npy_dict
    headwise::save_npy_dict(root, sd);
    REQUIRE(std::filesystem::exists(dir.path() / "state" / "out_proj.weight.npy"));

    // Neither other files nor subdirectories are entries.
    write_bytes(dir.file("state/meta.txt"), "embed_dim=8\n");
    headwise::save_npy_dict<double>(dir.file("state/grad"),
                                    {{"in_proj_bias", sd.at("in_proj_bias")}});

    const auto loaded = headwise::load_npy_dict<double>(root);
    REQUIRE(loaded.size() == sd.size());
    for (const auto& [key, tensor] : sd) {
        CAPTURE(key);
        REQUIRE(loaded.count(key) == 1);
        require_identical(loaded.at(key), tensor);
    }
    // The same files load as float too.
    const auto as_float = headwise::load_npy_dict<float>(root);
    REQUIRE(as_float.at("out_proj.bias")(3) == static_cast<float>(sd.at("out_proj.bias")(3)));

    SECTION("errors") {
        const std::string missing = dir.file("nothing_here");
        REQUIRE_THROWS_MATCHES(
            headwise::load_npy_dict<float>(missing), std::runtime_error,
            Message("headwise::load_npy_dict: " + missing + ": not a directory"));

        const std::string out = dir.file("rejected");
        REQUIRE_THROWS_MATCHES(
            headwise::save_npy_dict<double>(out,
                                            {{"ok", sd.at("bias_k")}, {"a/b", sd.at("bias_k")}}),
            std::invalid_argument,
            Message("headwise::save_npy_dict: tensors: keys must be file names (non-empty, no '/' "
                    "or '\\', not '.' or '..'), got 'a/b'"));
        REQUIRE_FALSE(std::filesystem::exists(out));  // nothing written
        REQUIRE_THROWS_AS(headwise::save_npy_dict<double>(out, {{"", sd.at("bias_k")}}),
                          std::invalid_argument);
        REQUIRE_THROWS_AS(headwise::save_npy_dict<double>(out, {{"..", sd.at("bias_k")}}),
                          std::invalid_argument);
    }
}

}  // namespace test_io_npy
