// SPDX-License-Identifier: MIT
// Tests of io/detail/json_file.hpp and io/detail/config_file.hpp: text and JSON files read only
// when they are regular files of bounded size and nesting, and JSON values described in bounded
// space.
#include <headwise/io/detail/config_file.hpp>
#include <headwise/io/detail/json_file.hpp>

#include <sys/stat.h>  // mkfifo

#include <chrono>      // std::chrono::steady_clock
#include <cstdint>     // std::uint64_t
#include <filesystem>  // std::filesystem::create_directory, create_symlink, resize_file
#include <fstream>     // std::ofstream
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/special_files.hpp"

namespace test_json_file {

using headwise::detail::describe_json;
using headwise::detail::quote_bounded;
using headwise::detail::read_json_file;
using headwise::detail::read_text_file;
using headwise::test::make_socket;
using headwise::test::ScratchDir;
using nlohmann::json;

namespace {

constexpr const char* kFn = "headwise::test::reader";

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary)
        .write(text.data(), static_cast<std::streamsize>(text.size()));
}

/// "[[[...]]]" nested `depth` levels.
std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("describe_json gives scalars as JSON writes them and containers by their size",
          "[detail][json]") {
    CHECK(describe_json(json(nullptr)) == "null");
    CHECK(describe_json(json(true)) == "true");
    CHECK(describe_json(json(-12)) == "-12");
    CHECK(describe_json(json(18446744073709551615ull)) == "18446744073709551615");
    CHECK(describe_json(json(1.5)) == "1.5");
    CHECK(describe_json(json("gelu\n")) == "\"gelu\\n\"");
    CHECK(describe_json(json::array()) == "an empty array");
    CHECK(describe_json(json::array({1})) == "an array of 1 element");
    CHECK(describe_json(json::array({1, json::array({2, 3})})) == "an array of 2 elements");
    CHECK(describe_json(json::object()) == "an empty object");
    CHECK(describe_json(json{{"a", 1}, {"b", json::array()}}) == "an object of 2 keys");
}

TEST_CASE("describe_json of a deeply nested value does not recurse", "[detail][json]") {
    // Built without read_json_file's depth bound: 200,000 levels, which a recursive dump() (as
    // the messages once used) overflows the stack on.
    const json deep = json::parse(nested(200000));
    CHECK(describe_json(deep) == "an array of 1 element");
}

TEST_CASE("a long string is quoted up to 64 bytes, cut at a character boundary", "[detail][json]") {
    const std::string exact(64, 'a');
    CHECK(quote_bounded(exact) == "\"" + exact + "\"");
    CHECK(quote_bounded(exact + "b") == "\"" + exact + "\"... (65 bytes)");
    // "é" is 2 bytes: 63 'a's and it reach byte 65, so the cut falls before it.
    const std::string accented = std::string(63, 'a') + "\xc3\xa9" + "zz";
    CHECK(quote_bounded(accented) == "\"" + std::string(63, 'a') + "\"... (67 bytes)");
    // An invalid byte is replaced, not thrown on.
    CHECK(quote_bounded("a\xff") == "\"a\xef\xbf\xbd\"");
}

TEST_CASE("a long string in a config.json gives a message of bounded length",
          "[detail][json][config]") {
    // 64 MB in memory (parsing that much from a file takes 18 s in a Debug build), 1 MB from a
    // config.json: the message is the same length either way.
    CHECK(describe_json(json(std::string(64000000, 'x'))) ==
          "\"" + std::string(64, 'x') + "\"... (64000000 bytes)");
    const ScratchDir dir("json-long-string");
    const std::string path = dir.file("config.json");
    write_text(path, "{\"model_type\": \"" + std::string(1000000, 'x') + "\"}");
    const headwise::detail::ConfigFile file(kFn, path);
    const std::string expected = std::string(kFn) + ": " + path +
                                 ": model_type: expected \"llama\", got \"" + std::string(64, 'x') +
                                 "\"... (1000000 bytes)";
    CHECK_THROWS_MATCHES(file.expect_string("model_type", "llama"), std::runtime_error,
                         Message(expected));
    CHECK(expected.size() < 200 + path.size());
}

TEST_CASE("config.json values of the wrong type are described, not written out",
          "[detail][json][config]") {
    const ScratchDir dir("json-config-values");
    const std::string path = dir.file("config.json");
    write_text(path, R"({"a": [[1, 2], 3], "b": {"c": [4]}, "u": 18446744073709551615, "m": -3})");
    const headwise::detail::ConfigFile file(kFn, path);
    headwise::Index v = 0;
    double d = 0;
    bool flag = false;
    const std::string at = std::string(kFn) + ": " + path + ": ";
    CHECK_THROWS_MATCHES(file.integer("a", v, true, 1), std::runtime_error,
                         Message(at + "a: expected an integer, got an array of 2 elements"));
    CHECK_THROWS_MATCHES(file.number("b", d, 0.0, false), std::runtime_error,
                         Message(at + "b: expected a finite number of at least 0.0, got an object "
                                      "of 1 key"));
    CHECK_THROWS_MATCHES(file.boolean("a", flag), std::runtime_error,
                         Message(at + "a: expected true or false, got an array of 2 elements"));
    // Beyond Index's range: said so, not wrapped to a negative number.
    CHECK_THROWS_MATCHES(file.integer("u", v, true, 1), std::runtime_error,
                         Message(at + "u: expected at most 9223372036854775807, got "
                                      "18446744073709551615"));
    CHECK_THROWS_MATCHES(file.integer("m", v, true, 1), std::runtime_error,
                         Message(at + "m: expected at least 1, got -3"));
}

TEST_CASE("JSON nested deeper than 128 levels is refused before it is parsed",
          "[detail][json][config]") {
    const ScratchDir dir("json-depth");
    const std::string path = dir.file("config.json");
    // 200,000 levels (400 KB): refused with the byte where the 129th level opens.
    write_text(path, "{\"vocab_size\": " + nested(200000) + "}");
    CHECK_THROWS_MATCHES(headwise::detail::ConfigFile(kFn, path), std::runtime_error,
                         Message(std::string(kFn) + ": " + path +
                                 ": JSON nested deeper than 128 levels (at byte 142)"));
    // 128 levels in all (the object and 127 arrays) are read; brackets inside strings are text.
    write_text(path, "{\"vocab_size\": " + nested(127) + ", \"s\": \"" + std::string(500, '[') +
                         "\\\"[\"}");
    const headwise::detail::ConfigFile file(kFn, path);
    headwise::Index v = 0;
    CHECK_THROWS_MATCHES(file.integer("vocab_size", v, true, 1), std::runtime_error,
                         Message(std::string(kFn) + ": " + path +
                                 ": vocab_size: expected an integer, got an array of 1 element"));
    CHECK(file.json().at("s").get<std::string>().size() == 502);
}

TEST_CASE("only regular files are read: a directory, FIFO, socket or device is refused first",
          "[detail][json][files]") {
    namespace fs = std::filesystem;
    const ScratchDir dir("json-special");
    const std::string at = std::string(kFn) + ": ";
    const auto refused = [&](const std::string& path, const std::string& kind) {
        const auto start = std::chrono::steady_clock::now();
        CHECK_THROWS_MATCHES(read_text_file(kFn, path), std::runtime_error,
                             Message(at + path + ": is " + kind + ", not a regular file"));
        CHECK_THROWS_MATCHES(read_json_file(kFn, path), std::runtime_error,
                             Message(at + path + ": is " + kind + ", not a regular file"));
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    };
    const std::string directory = dir.file("config.json");
    fs::create_directory(directory);
    refused(directory, "a directory");
    // Opening a FIFO for reading would wait for a writer that never comes.
    const std::string fifo = dir.file("fifo.json");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    refused(fifo, "a FIFO");
    const std::string socket = dir.file("socket.json");
    REQUIRE(make_socket(socket));
    refused(socket, "a socket");
    // A config.json that leads to /dev/zero would be read forever.
    const std::string zero = dir.file("zero.json");
    fs::create_symlink("/dev/zero", zero);
    refused(zero, "a symbolic link to a character device");
    const std::string to_fifo = dir.file("to_fifo.json");
    fs::create_symlink(fifo, to_fifo);
    refused(to_fifo, "a symbolic link to a FIFO");
    // A regular file through a symbolic link is read.
    write_text(dir.file("real.json"), "{\"a\": 1}");
    fs::create_symlink(dir.file("real.json"), dir.file("link.json"));
    CHECK(read_json_file(kFn, dir.file("link.json")).at("a") == 1);
    CHECK_THROWS_MATCHES(read_text_file(kFn, dir.file("missing.json")), std::runtime_error,
                         Message(at + dir.file("missing.json") + ": cannot open the file"));
}

TEST_CASE("a text file larger than 64 MiB is refused before it is read", "[detail][json][files]") {
    const ScratchDir dir("json-size");
    const std::string path = dir.file("config.json");
    write_text(path, "{}");
    // Sparse: no 64 MiB written to the disk.
    std::filesystem::resize_file(path, headwise::detail::kMaxTextFileBytes + 1);
    CHECK_THROWS_MATCHES(read_json_file(kFn, path), std::runtime_error,
                         Message(std::string(kFn) + ": " + path +
                                 ": holds 67108865 bytes, more than the 67108864 bytes (64 MiB) "
                                 "a text or JSON file may have"));
    std::filesystem::resize_file(path, 20);
    CHECK(read_text_file(kFn, path, 20).size() == 20);
    CHECK_THROWS_MATCHES(read_text_file(kFn, path, 19), std::runtime_error,
                         Message(std::string(kFn) + ": " + path +
                                 ": holds 20 bytes, more than the 19 bytes a text or JSON file "
                                 "may have"));
    // A file whose size the file system does not tell (procfs says 0) is bounded as it is read.
    const std::string status = "/proc/self/status";
    if (std::filesystem::exists(status)) {
        CHECK_THROWS_MATCHES(read_text_file(kFn, status, 16), std::runtime_error,
                             Message(std::string(kFn) + ": " + status +
                                     ": holds more than the 16 bytes a text or JSON file may "
                                     "have"));
    }
}

}  // namespace test_json_file
