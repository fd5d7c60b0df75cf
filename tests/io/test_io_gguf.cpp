// SPDX-License-Identifier: MIT
// Tests of headwise/io/gguf.hpp: the files of llama.cpp's gguf package read (v3 and v2, every
// metadata type, alignment 64), the writer (byte-identical to the package's file, round trips,
// atomic, refusals), and the strict validation of malformed files (messages word for word).
#include <headwise/io/gguf.hpp>
#include <headwise/quant/quantize.hpp>

#include <sys/stat.h>  // ::mkfifo, S_ISFIFO
#include <unistd.h>    // ::sysconf

#include <cmath>       // std::isinf
#include <cstdint>     // std::uint8_t, std::uint32_t, std::uint64_t, std::uintptr_t
#include <cstring>     // std::memcpy
#include <filesystem>  // std::filesystem::exists, status
#include <fstream>     // std::ifstream, std::ofstream
#include <iterator>    // std::istreambuf_iterator
#include <limits>      // std::numeric_limits
#include <memory>      // std::shared_ptr
#include <stdexcept>   // std::runtime_error, std::invalid_argument
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/failing_writes.hpp"
#include "support/golden.hpp"

namespace test_io_gguf {

using namespace headwise;
using headwise::io::GgufValue;
using headwise::io::GgufValueType;
using headwise::test::ScratchDir;

namespace {

std::string golden(const std::string& name) {
    return (test::golden_dir() / "gguf" / name).string();
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in),
                                     std::istreambuf_iterator<char>());
}

/// A GGUF file image, field by field.
struct Image {
    std::vector<std::uint8_t> bytes;
    Image& u8(std::uint8_t v) {
        bytes.push_back(v);
        return *this;
    }
    Image& u32(std::uint32_t v) {
        for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
        return *this;
    }
    Image& u64(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
        return *this;
    }
    Image& str(const std::string& s) {
        u64(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
        return *this;
    }
    /// "GGUF", version, tensor count, key-value count.
    static Image header(std::uint64_t tensors, std::uint64_t pairs, std::uint32_t version = 3) {
        Image im;
        im.u32(0x46554747).u32(version).u64(tensors).u64(pairs);
        return im;
    }
    /// A tensor info.
    Image& tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type,
                  std::uint64_t offset) {
        str(name).u32(static_cast<std::uint32_t>(dims.size()));
        for (auto d : dims) u64(d);
        return u32(type).u64(offset);
    }
    /// Zeros up to a multiple of `alignment`, then `data` zero bytes.
    Image& data(std::size_t data_bytes, std::size_t alignment = 32) {
        while (bytes.size() % alignment) bytes.push_back(0);
        bytes.insert(bytes.end(), data_bytes, 0);
        return *this;
    }
};

std::string error_of(const std::vector<std::uint8_t>& bytes) {
    try {
        io::parse_gguf(bytes.data(), bytes.size(), "m.gguf");
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "no error";
}

const std::string kFn = "headwise::io::parse_gguf: m.gguf: ";

}  // namespace

TEST_CASE("load_gguf reads the gguf package's v3 file: every value type, alignment 64",
          "[io][gguf]") {
    const io::GgufFile f = io::load_gguf(golden("types_v3.gguf"));
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 64);
    CHECK(f.data_offset() % 64 == 0);
    CHECK(f.mapped());
    CHECK(f.value("general.architecture").as_string() == "headwise-test");
    CHECK(f.value("general.alignment") == GgufValue::uint32(64));
    CHECK(f.value("test.uint8") == GgufValue::uint8(200));
    CHECK(f.value("test.int8") == GgufValue::int8(-100));
    CHECK(f.value("test.uint16") == GgufValue::uint16(60000));
    CHECK(f.value("test.int16") == GgufValue::int16(-30000));
    CHECK(f.value("test.uint32") == GgufValue::uint32(4000000000u));
    CHECK(f.value("test.int32") == GgufValue::int32(-2000000000));
    CHECK(f.value("test.float32") == GgufValue::float32(0.1f));
    CHECK(f.value("test.uint64") == GgufValue::uint64(18000000000000000000ull));
    CHECK(f.value("test.int64") == GgufValue::int64(-9000000000000000000ll));
    CHECK(f.value("test.float64") == GgufValue::float64(-2.5e-300));
    CHECK(f.value("test.bool_true").as_bool());
    CHECK(!f.value("test.bool_false").as_bool());
    CHECK(f.value("test.string").as_string() == "h\xC3\xA9llo, w\xC3\xB6rld");
    CHECK(f.find("test.empty_string") == nullptr);  // the package skips empty strings
    CHECK(f.value("test.int8").as_int() == -100);
    CHECK(f.value("test.uint64").as_uint() == 18000000000000000000ull);
    CHECK(f.value("test.float32").as_float() == static_cast<double>(0.1f));

    CHECK(f.value("test.array.uint8").to_vector<std::uint8_t>() ==
          std::vector<std::uint8_t>{1, 2, 255});
    CHECK(f.value("test.array.int8").to_vector<std::int8_t>() ==
          std::vector<std::int8_t>{-128, 0, 127});
    CHECK(f.value("test.array.uint16").to_vector<std::uint16_t>() ==
          std::vector<std::uint16_t>{0, 65535});
    CHECK(f.value("test.array.int16").to_vector<std::int16_t>() ==
          std::vector<std::int16_t>{-32768, 32767});
    CHECK(f.value("test.array.uint32").to_vector<std::uint32_t>() ==
          std::vector<std::uint32_t>{0, 4294967295u});
    CHECK(f.value("test.array.int32").to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 2147483647});
    const auto f32 = f.value("test.array.float32").to_vector<float>();
    REQUIRE(f32.size() == 3);
    CHECK(f32[0] == 1.5f);
    CHECK(std::signbit(f32[1]));
    CHECK(std::isinf(f32[2]));
    CHECK(f.value("test.array.uint64").to_vector<std::uint64_t>() ==
          std::vector<std::uint64_t>{0, ~std::uint64_t{0}});
    CHECK(f.value("test.array.int64").to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()});
    CHECK(f.value("test.array.float64").to_vector<double>() == std::vector<double>{1e300, -1e-300});
    CHECK(f.value("test.array.bool").to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK(f.value("test.array.string").to_vector<std::string>() ==
          std::vector<std::string>{"a", "", "<0xFF>", "\xC3\xBC"});
    // [[1, 2], [3], [[4, 5], [6]]]: arrays of arrays, the inner ones typed by their elements.
    const GgufValue& nested = f.value("test.array.nested");
    REQUIRE(nested.element_type() == GgufValueType::array);
    REQUIRE(nested.size() == 3);
    CHECK(nested[0].to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2});
    CHECK(nested[1].to_vector<std::int32_t>() == std::vector<std::int32_t>{3});
    CHECK(nested[2].element_type() == GgufValueType::array);
    CHECK(nested[2][0].to_vector<std::int32_t>() == std::vector<std::int32_t>{4, 5});
    CHECK(nested[2][1][0].as_int() == 6);

    // One tensor of every type, dims in ggml's order (the row first), shape reversed.
    const std::vector<std::pair<std::string, quant::Type>> types = {
        {"F32", quant::Type::f32},   {"F16", quant::Type::f16},   {"BF16", quant::Type::bf16},
        {"Q8_0", quant::Type::q8_0}, {"Q4_0", quant::Type::q4_0}, {"Q4_1", quant::Type::q4_1},
        {"Q5_0", quant::Type::q5_0}, {"Q5_1", quant::Type::q5_1}, {"Q4_K", quant::Type::q4_k},
        {"Q6_K", quant::Type::q6_k}};
    REQUIRE(f.tensors().size() == types.size());
    for (std::size_t i = 0; i < types.size(); ++i) {
        const io::GgufTensorInfo& t = f.tensors()[i];
        CHECK(t.name == types[i].first);
        CHECK(t.type == types[i].second);
        CHECK(t.offset % 64 == 0);
        CHECK(t.shape() == Shape({static_cast<Index>(t.dims[1]), static_cast<Index>(t.dims[0])}));
    }
    CHECK(f.tensor("Q4_K").dims == std::vector<std::uint64_t>{512, 12});
    CHECK(f.tensor("Q4_K").bytes == 24 * 144);
}

TEST_CASE("load_gguf reads a v2 file", "[io][gguf]") {
    const io::GgufFile f = io::load_gguf(golden("small_v2.gguf"));
    CHECK(f.version() == 2);
    CHECK(f.alignment() == 32);
    CHECK(f.value("general.name").as_string() == "small");
    CHECK(f.value("test.count").as_uint() == 7);
    const Tensor<float> a = f.to_float("a.weight");
    CHECK(a.shape() == Shape({2, 3}));
    for (Index i = 0; i < 6; ++i) CHECK(a.data()[i] == static_cast<float>(i));
    CHECK(f.tensor("b.weight").type == quant::Type::q8_0);
    CHECK(f.to_float("b.weight").shape() == Shape({2, 32}));
    CHECK_THROWS_MATCHES(f.value("missing"), std::out_of_range,
                         Message("headwise::io::GgufFile::value: " + golden("small_v2.gguf") +
                                 ": no key 'missing'"));
    CHECK_THROWS_MATCHES(f.value("general.name").as_uint(), std::invalid_argument,
                         Message("headwise::io::GgufValue::as_uint: the value is STRING, not "
                                 "an integer"));
}

TEST_CASE("save_gguf writes the gguf package's file byte for byte", "[io][gguf]") {
    // Same pairs, same tensors, same alignment: the same bytes as GGUFWriter's.
    const std::string path = golden("types_v3.gguf");
    const io::GgufFile f = io::load_gguf(path);
    std::vector<io::GgufTensorData> tensors;
    for (const io::GgufTensorInfo& t : f.tensors())
        tensors.push_back({t.name, t.type, t.shape(), f.tensor_data(t)});
    const ScratchDir dir("gguf");
    io::save_gguf(dir.file("copy.gguf"), f.metadata(), tensors, 64);
    CHECK(read_bytes(dir.file("copy.gguf")) == read_bytes(path));
    // And back: the same pairs and tensors.
    const io::GgufFile back = io::load_gguf(dir.file("copy.gguf"));
    CHECK(back.metadata() == f.metadata());
}

TEST_CASE("save_gguf round trip of quantized tensors, default alignment", "[io][gguf]") {
    Generator rng(7);
    const Tensor<float> w = Tensor<float>::randn(Shape{3, 64}, rng);
    std::vector<std::uint8_t> q8(
        static_cast<std::size_t>(3 * quant::row_bytes(quant::Type::q8_0, 64)));
    quant::quantize_row(quant::Type::q8_0, w.data(), q8.data(), 3 * 64);
    const Tensor<float> bias = Tensor<float>::randn(Shape{5}, rng);
    const ScratchDir dir("gguf");
    const std::string path = dir.file("m.gguf");
    io::save_gguf(path,
                  {{"general.architecture", GgufValue::string("llama")},
                   {"empty", GgufValue::array(GgufValueType::string, {})},
                   {"deep", GgufValue::array(GgufValueType::array,
                                             {GgufValue::array_of(std::vector<float>{1.f})})}},
                  {{"w", quant::Type::q8_0, w.shape(), q8.data()},
                   {"b", quant::Type::f32, bias.shape(), bias.data()}});
    const io::GgufFile f = io::load_gguf(path);
    CHECK(f.alignment() == 32);
    CHECK(f.find("general.alignment") == nullptr);
    CHECK(f.value("empty").size() == 0);
    CHECK(f.value("deep")[0].to_vector<float>() == std::vector<float>{1.f});
    std::vector<float> expected(3 * 64);
    quant::dequantize_row(quant::Type::q8_0, q8.data(), expected.data(), 3 * 64);
    const Tensor<float> got = f.to_float("w");
    CHECK(got.shape() == Shape({3, 64}));
    CHECK(std::vector<float>(got.data(), got.data() + 192) == expected);
    const Tensor<float> b = f.to_float("b");
    CHECK(std::vector<float>(b.data(), b.data() + 5) ==
          std::vector<float>(bias.data(), bias.data() + 5));
}

TEST_CASE("release_pages drops a mapped tensor's whole pages, and its bytes read the same after",
          "[io][gguf]") {
    Generator rng(11);
    const Tensor<float> small = Tensor<float>::randn(Shape{5}, rng);
    const Tensor<float> big = Tensor<float>::randn(Shape{5000}, rng);  // 20000 bytes
    const ScratchDir dir("gguf");
    const std::string path = dir.file("pages.gguf");
    io::save_gguf(path, {{"general.architecture", GgufValue::string("llama")}},
                  {{"small", quant::Type::f32, small.shape(), small.data()},
                   {"big", quant::Type::f32, big.shape(), big.data()}});
    const io::GgufFile f = io::load_gguf(path);
    REQUIRE(f.mapped());
    const io::GgufTensorInfo& info = f.tensor("big");
    const auto* at = reinterpret_cast<const float*>(f.tensor_data(info));
    const std::vector<float> before(at, at + 5000);
    // The whole pages inside [begin, end): none of the neighbours' bytes.
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<std::uintptr_t>(at);
    const std::uintptr_t first = (begin + page - 1) / page * page;
    const std::uintptr_t last = (begin + info.bytes) / page * page;
    CHECK(f.release_pages(info) == last - first);
    CHECK(last - first >= page);
    CHECK(f.release_pages(f.tensor("small")) == 0);      // 20 bytes: no whole page
    CHECK(std::vector<float>(at, at + 5000) == before);  // read from the file again
    CHECK(std::vector<float>(at, at + 5000) == std::vector<float>(big.data(), big.data() + 5000));
    // Bytes held in memory (parse_gguf) stay: nothing released.
    std::ifstream in(path, std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                          std::istreambuf_iterator<char>());
    const io::GgufFile held = io::parse_gguf(bytes.data(), bytes.size());
    CHECK(held.release_pages(held.tensor("big")) == 0);
}

TEST_CASE("bytes_owner keeps tensor_data valid after the GgufFile is gone", "[io][gguf]") {
    std::shared_ptr<const void> owner;
    const std::uint8_t* data = nullptr;
    std::vector<std::uint8_t> expected;
    {
        const io::GgufFile f = io::load_gguf(golden("small_v2.gguf"));
        const io::GgufTensorInfo& info = f.tensors().front();
        data = f.tensor_data(info);
        expected.assign(data, data + info.bytes);
        owner = f.bytes_owner();
        CHECK(owner.get() != nullptr);
    }
    CHECK(std::vector<std::uint8_t>(data, data + expected.size()) == expected);
}

TEST_CASE("save_gguf refuses bad input before touching the file", "[io][gguf]") {
    const ScratchDir dir("gguf");
    const std::string path = dir.file("m.gguf");
    const std::vector<float> v(64, 1.0f);
    const std::string fn = "headwise::io::save_gguf: " + path + ": ";
    const auto refuses = [&](const std::vector<std::pair<std::string, GgufValue>>& md,
                             const std::vector<io::GgufTensorData>& ts, std::uint32_t alignment,
                             const std::string& message) {
        CHECK_THROWS_MATCHES(io::save_gguf(path, md, ts, alignment), std::invalid_argument,
                             Message(fn + message));
        CHECK(!std::filesystem::exists(path));
        CHECK(test::listing(dir.path()).empty());
    };
    refuses(
        {},
        {{"a", quant::Type::f32, Shape{4}, v.data()}, {"a", quant::Type::f32, Shape{4}, v.data()}},
        32, "tensor 'a' is given twice");
    refuses({}, {{std::string(64, 'n'), quant::Type::f32, Shape{4}, v.data()}}, 32,
            "tensor '" + std::string(64, 'n') + "' has a name of 64 bytes, longer than ggml's 63");
    refuses({}, {{"", quant::Type::f32, Shape{4}, v.data()}}, 32, "a tensor name is empty");
    refuses({}, {{"q", quant::Type::q4_0, Shape{2, 48}, v.data()}}, 32,
            "tensor 'q' of type Q4_0 has shape [2, 48]: its rows of 48 values are no multiple "
            "of the block size 32");
    refuses({}, {{"s", quant::Type::f32, Shape{1, 1, 1, 1, 1}, v.data()}}, 32,
            "tensor 's' has shape [1, 1, 1, 1, 1]: GGUF tensors have 1 to 4 dims");
    refuses({}, {{"t", static_cast<quant::Type>(17), Shape{256}, v.data()}}, 32,
            "tensor 't' has type IQ2_XS (17), which headwise does not write; it writes F32, "
            "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K");
    refuses({}, {{"n", quant::Type::f32, Shape{4}, nullptr}}, 32,
            "tensor 'n' has no bytes (a null pointer)");
    refuses({{"k", GgufValue::uint8(1)}, {"k", GgufValue::uint8(2)}}, {}, 32,
            "key 'k' is given twice");
    refuses({{"", GgufValue::uint8(1)}}, {}, 32, "a key is empty");
    refuses({}, {}, 48, "alignment 48 is not a power of two");
    refuses({{"general.alignment", GgufValue::uint32(32)}}, {}, 64,
            "key 'general.alignment' must be the UINT32 64, the alignment the file is written "
            "with");
    GgufValue deep = GgufValue::uint8(0);
    for (int i = 0; i < 9; ++i) deep = GgufValue::array(deep.type(), {deep});
    refuses({{"deep", deep}}, {}, 32, "key 'deep' has arrays nested deeper than 8 levels");
}

TEST_CASE("GgufValue refuses ill-formed values and mismatched reads", "[io][gguf]") {
    CHECK_THROWS_MATCHES(GgufValue::scalar(GgufValueType::string, 1), std::invalid_argument,
                         Message("headwise::io::GgufValue::scalar: STRING is not a scalar type"));
    CHECK_THROWS_MATCHES(GgufValue::scalar(GgufValueType::boolean, 2), std::invalid_argument,
                         Message("headwise::io::GgufValue::scalar: a BOOL is 0 or 1, not 2"));
    CHECK_THROWS_MATCHES(GgufValue::scalar_array(GgufValueType::uint32, "abc"),
                         std::invalid_argument,
                         Message("headwise::io::GgufValue::scalar_array: 3 bytes are no array "
                                 "of UINT32 values"));
    CHECK_THROWS_MATCHES(GgufValue::array(GgufValueType::uint8, {GgufValue::int8(1)}),
                         std::invalid_argument,
                         Message("headwise::io::GgufValue::array: element 0 is INT8, not UINT8"));
    CHECK_THROWS_MATCHES(GgufValue::array_of(std::vector<float>{1.f}).to_vector<double>(),
                         std::invalid_argument,
                         Message("headwise::io::GgufValue::to_vector: the value is ARRAY of "
                                 "FLOAT32, not ARRAY of FLOAT64"));
    CHECK_THROWS_MATCHES(GgufValue::uint64(~std::uint64_t{0}).as_int(), std::invalid_argument,
                         Message("headwise::io::GgufValue::as_int: the UINT64 value "
                                 "18446744073709551615 exceeds INT64's range"));
    CHECK_THROWS_MATCHES(GgufValue::int8(-1).as_uint(), std::invalid_argument,
                         Message("headwise::io::GgufValue::as_uint: the INT8 value -1 is "
                                 "negative"));
    CHECK_THROWS_MATCHES(GgufValue::uint8(1)[0], std::invalid_argument,
                         Message("headwise::io::GgufValue::operator[]: the value is UINT8, not "
                                 "ARRAY"));
    CHECK_THROWS_MATCHES(GgufValue::array_of(std::vector<std::string>{"a"})[1], std::out_of_range,
                         Message("headwise::io::GgufValue::operator[]: index 1 of an array of 1 "
                                 "elements"));
}

TEST_CASE("save_gguf is atomic and refuses a target that is not a regular file", "[io][gguf]") {
    const ScratchDir dir("gguf");
    const std::string path = dir.file("m.gguf");
    const std::vector<float> v(1024, 2.0f);
    const std::vector<io::GgufTensorData> ts = {{"a", quant::Type::f32, Shape{1024}, v.data()}};
    io::save_gguf(path, {}, ts);
    const auto before = read_bytes(path);
    // A device that fills up part way: the old file stays, no temporary file is left.
    CHECK_THROWS_AS(io::detail::gguf::save(path, {{"x", GgufValue::uint8(1)}}, ts, 32,
                                           test::FillingDevice{100}),
                    std::runtime_error);
    CHECK(read_bytes(path) == before);
    CHECK(test::listing(dir.path()) == std::vector<std::string>{"m.gguf"});
    // A FIFO stays a FIFO.
    const std::string fifo = dir.file("fifo.gguf");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::string message = "no error";
    try {
        io::save_gguf(fifo, {}, ts);
    } catch (const std::runtime_error& e) {
        message = e.what();
    }
    CHECK_THAT(message, StartsWith("headwise::io::save_gguf: " + fifo + ": "));
    struct stat st {};
    REQUIRE(::lstat(fifo.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK(test::listing(dir.path()) == std::vector<std::string>{"fifo.gguf", "m.gguf"});
}

TEST_CASE("load_gguf opens regular files only", "[io][gguf]") {
    const ScratchDir dir("gguf");
    const std::string fifo = dir.file("fifo.gguf");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // Refused without waiting for a writer.
    CHECK_THROWS_MATCHES(
        io::load_gguf(fifo), std::runtime_error,
        Message("headwise::io::load_gguf: " + fifo + ": is a FIFO, not a regular file"));
    CHECK_THROWS_MATCHES(io::load_gguf(dir.path().string()), std::runtime_error,
                         Message("headwise::io::load_gguf: " + dir.path().string() +
                                 ": is a directory, not a regular file"));
    CHECK_THROWS_MATCHES(io::load_gguf(dir.file("none.gguf")), std::runtime_error,
                         Message("headwise::io::load_gguf: " + dir.file("none.gguf") +
                                 ": cannot open the file (No such file or directory)"));
    std::ofstream(dir.file("empty.gguf")).close();
    CHECK_THROWS_MATCHES(io::load_gguf(dir.file("empty.gguf")), std::runtime_error,
                         Message("headwise::io::load_gguf: " + dir.file("empty.gguf") +
                                 ": file of 0 bytes is too short for a GGUF header (24 bytes: "
                                 "magic, version, tensor count, key-value count)"));
}

TEST_CASE("malformed GGUF headers and metadata are refused by name", "[io][gguf]") {
    // Truncated header, wrong magic, versions.
    Image h = Image::header(0, 0);
    h.bytes.resize(10);
    CHECK(error_of(h.bytes) == kFn +
                                   "file of 10 bytes is too short for a GGUF header (24 bytes: "
                                   "magic, version, tensor count, key-value count)");
    Image magic = Image::header(0, 0);
    magic.bytes[0] = 'P';
    CHECK(error_of(magic.bytes) ==
          kFn + "does not start with the GGUF magic \"GGUF\" (its first bytes are 50 47 55 46)");
    CHECK(error_of(Image::header(0, 0, 1).bytes) ==
          kFn + "GGUF version 1 is not read (headwise reads versions 2 and 3)");
    CHECK(error_of(Image::header(0, 0, 0x03000000).bytes) ==
          kFn +
              "is a big-endian GGUF file (version field 50331648); headwise reads "
              "little-endian GGUF files");
    // Counts no file of this size can hold.
    CHECK(error_of(Image::header(std::uint64_t{1} << 60, 0).bytes) ==
          kFn +
              "the header declares 1152921504606846976 tensors and 0 key-value pairs, more "
              "than the 0 bytes after it can hold (25 bytes a tensor info and 14 a pair at "
              "least)");
    Image pairs = Image::header(0, ~std::uint64_t{0});
    pairs.bytes.resize(100);
    CHECK(error_of(pairs.bytes) ==
          kFn +
              "the header declares 0 tensors and 18446744073709551615 key-value pairs, more "
              "than the 76 bytes after it can hold (25 bytes a tensor info and 14 a pair at "
              "least)");
    // A string length past the end (and one that would overflow an offset).
    Image key = Image::header(0, 1);
    key.u64(~std::uint64_t{0}).u32(0).u8(0).u8(0);
    CHECK(error_of(key.bytes) ==
          kFn +
              "key-value pair 0 has a string (its key) of 18446744073709551615 bytes at "
              "offset 32, past the end of the file (38 bytes)");
    Image value = Image::header(0, 1);
    value.str("a").u32(8).u64(1000).u8('x');
    CHECK(error_of(value.bytes) ==
          kFn +
              "key 'a' has a string (the value) of 1000 bytes at offset 45, past the end of "
              "the file (46 bytes)");
    Image cut = Image::header(0, 1);
    cut.str("a").u32(4).u8(1).u8(2);
    CHECK(error_of(cut.bytes) == kFn +
                                     "key 'a' is cut off: its UINT32 at offset 37 needs 4 "
                                     "bytes, but the file ends 2 bytes later");
    // Types, bools, arrays.
    Image type = Image::header(0, 1);
    type.str("a").u32(13).u64(0);
    CHECK(error_of(type.bytes) ==
          kFn + "key 'a' has value type 13, which GGUF does not define (0 to 12)");
    Image boolean = Image::header(0, 1);
    boolean.str("a").u32(7).u8(2);
    CHECK(error_of(boolean.bytes) ==
          kFn + "key 'a' has the BOOL byte 2 at offset 37, expected 0 or 1");
    Image array = Image::header(0, 1);
    array.str("a").u32(9).u32(4).u64(std::uint64_t{1} << 62).u32(0);
    CHECK(error_of(array.bytes) ==
          kFn +
              "key 'a' has an array of 4611686018427387904 UINT32 values at offset 49, more "
              "than the 4 bytes left in the file hold");
    Image element = Image::header(0, 1);
    element.str("a").u32(9).u32(99).u64(0);
    CHECK(error_of(element.bytes) ==
          kFn + "key 'a' has an array of value type 99, which GGUF does not define (0 to 12)");
    Image deep = Image::header(0, 1);
    deep.str("deep").u32(9);
    for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
    deep.u32(0).u64(0);
    CHECK(error_of(deep.bytes) == kFn + "key 'deep' has arrays nested deeper than 8 levels");
    // Duplicates and the alignment.
    Image twice = Image::header(0, 2);
    twice.str("a").u32(0).u8(1).str("a").u32(0).u8(2);
    CHECK(error_of(twice.bytes) == kFn + "key 'a' is declared twice");
    Image empty = Image::header(0, 1);
    empty.str("").u32(0).u8(1).u8(0);
    CHECK(error_of(empty.bytes) == kFn + "key-value pair 0 has an empty key");
    Image align = Image::header(0, 1);
    align.str("general.alignment").u32(4).u32(48);
    CHECK(error_of(align.bytes) == kFn + "key 'general.alignment' is 48, not a power of two");
    Image align_type = Image::header(0, 1);
    align_type.str("general.alignment").u32(10).u64(32);
    CHECK(error_of(align_type.bytes) ==
          kFn + "key 'general.alignment' must be a UINT32, not UINT64");
    // Names from the file are quoted shortened and with control bytes as '?'.
    Image long_key = Image::header(0, 2);
    const std::string name = "\n" + std::string(100, 'k');
    long_key.str(name).u32(0).u8(1).str(name).u32(0).u8(2);
    CHECK(error_of(long_key.bytes) ==
          kFn + "key '?" + std::string(79, 'k') + "...' is declared twice");
}

TEST_CASE("malformed GGUF tensor infos are refused by name", "[io][gguf]") {
    // The message of the type headwise does not read, exactly.
    Image iq = Image::header(1, 0);
    iq.tensor("blk.0.ffn_up.weight", {256, 2}, 17, 0).data(2 * 74);
    CHECK(error_of(iq.bytes) ==
          kFn +
              "tensor 'blk.0.ffn_up.weight' has type IQ2_XS (17), which headwise does not "
              "read; it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K");
    Image unknown = Image::header(1, 0);
    unknown.tensor("t", {32}, 99, 0).data(64);
    CHECK(error_of(unknown.bytes) ==
          kFn +
              "tensor 't' has type unknown (99), which headwise does not read; it reads F32, "
              "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K");
    Image twice = Image::header(2, 0);
    twice.tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).data(64);
    CHECK(error_of(twice.bytes) == kFn + "tensor 't' is declared twice");
    Image dims = Image::header(1, 0);
    dims.tensor("t", {1, 1, 1, 1, 1}, 0, 0).data(32);
    CHECK(error_of(dims.bytes) == kFn + "tensor 't' has 5 dimensions, more than ggml's 4");
    Image huge = Image::header(1, 0);
    huge.tensor("t", {std::uint64_t{1} << 32, std::uint64_t{1} << 32}, 0, 0).data(32);
    CHECK(error_of(huge.bytes) ==
          kFn +
              "tensor 't' has dimensions [4294967296, 4294967296] (ggml order) of more "
              "elements than 9223372036854775807");
    Image row = Image::header(1, 0);
    row.tensor("t", {48, 2}, 2, 0).data(64);
    CHECK(error_of(row.bytes) ==
          kFn +
              "tensor 't' of type Q4_0 has rows of 48 values (dimension 0 of [48, 2]), not a "
              "multiple of its block size 32");
    // Data offsets: misaligned, outside the file, overlapping.
    Image misaligned = Image::header(1, 0);
    misaligned.tensor("t", {4}, 0, 16).data(64);
    CHECK(error_of(misaligned.bytes) ==
          kFn + "tensor 't' has data offset 16, not a multiple of the alignment 32");
    Image outside = Image::header(1, 0);
    outside.tensor("t", {64}, 0, 0).data(100);
    CHECK(error_of(outside.bytes) ==
          kFn +
              "tensor 't' has its 256 bytes of data at [0, 256) of the data section, which "
              "holds 100 bytes (from offset 64 of the file)");
    Image wrap = Image::header(1, 0);
    wrap.tensor("t", {16}, 0, ~std::uint64_t{0} - 31).data(100);  // the end overflows
    CHECK(error_of(wrap.bytes) ==
          kFn +
              "tensor 't' has its 64 bytes of data at [18446744073709551584, 2^64+) of the "
              "data section, which holds 100 bytes (from offset 64 of the file)");
    Image overlap = Image::header(2, 0);
    overlap.tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).data(96);
    CHECK(error_of(overlap.bytes) ==
          kFn + "tensor 'b' has data [32, 48) overlapping tensor 'a''s [0, 64)");
    Image start = Image::header(1, 0);
    start.tensor("t", {0}, 0, 0);
    CHECK(error_of(start.bytes) ==
          kFn +
              "the data section would start at offset 64 (the tensor infos end at 57, "
              "aligned to 32), past the end of the file (57 bytes)");
    Image cut = Image::header(1, 0);
    cut.str("tensor_name_long").u32(2).u64(4);
    CHECK(error_of(cut.bytes) == kFn +
                                     "tensor 'tensor_name_long' is cut off: a dimension at "
                                     "offset 60 needs 8 bytes, but the file ends 0 bytes later");
    Image long_name = Image::header(1, 0);
    long_name.tensor(std::string(64, 't'), {4}, 0, 0).data(32);
    CHECK(error_of(long_name.bytes) == kFn + "tensor '" + std::string(64, 't') +
                                           "' has a name of 64 bytes, longer than ggml's 63");
    // Well-formed: zero-sized tensors share an offset; no tensors, no data section.
    Image ok = Image::header(3, 0);
    ok.tensor("e", {0, 3}, 0, 0).tensor("f", {0}, 2, 0).tensor("s", {}, 0, 0).data(32);
    CHECK(error_of(ok.bytes) == "no error");
    CHECK(error_of(Image::header(0, 0).bytes) == "no error");
}

}  // namespace test_io_gguf
