// SPDX-License-Identifier: MIT
// Tests of io/detail/file_kind.hpp: each kind told from its first bytes, and the loaders' messages.
#include <headwise/io/detail/file_kind.hpp>
#include <headwise/io/npy.hpp>

#if __has_include(<nlohmann/json.hpp>)
#include <headwise/io/checkpoint.hpp>
#include <headwise/io/safetensors.hpp>
#define HEADWISE_TEST_SAFETENSORS 1
#else
#define HEADWISE_TEST_SAFETENSORS 0
#endif

#include <cstdint>     // std::uint8_t, std::uint64_t
#include <filesystem>  // std::filesystem::copy_file
#include <fstream>     // std::ifstream, std::ofstream
#include <iterator>    // std::istreambuf_iterator
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace test_file_kind {

using headwise::detail::FileKind;
using headwise::test::ScratchDir;

namespace {

/// tests/golden/interop/<name>, written by tests/golden/make_interop_golden.py.
std::string fixture(const std::string& name) {
    return (headwise::test::golden_dir() / "interop" / name).string();
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

FileKind kind_of(const std::string& bytes) {
    return headwise::detail::file_kind(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                       bytes.size(), bytes.size());
}

FileKind kind_of_file(const std::string& path) {
    std::uint64_t size = 0;
    const std::vector<std::uint8_t> head = headwise::detail::read_file_prefix(path, size);
    return headwise::detail::file_kind(head.data(), head.size(), size);
}

std::string le64(std::uint64_t v) {
    std::string s;
    for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
    return s;
}

/// A zip local file header (PKWARE APPNOTE 4.3.7) for a stored entry `name` of `data`.
std::string zip_entry(const std::string& name, const std::string& data) {
    const auto le = [](std::uint64_t v, int bytes) {
        std::string s;
        for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
        return s;
    };
    return "PK\x03\x04" + le(20, 2) + le(0, 2) + le(0, 2) + le(0, 4) + le(0, 4) +
           le(data.size(), 4) + le(data.size(), 4) + le(name.size(), 2) + le(0, 2) + name + data;
}

/// A safetensors file with one F32 entry of two zeros and the header padded to `header_size`.
std::string safetensors_bytes(std::size_t header_size) {
    std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    header.append(header_size - header.size(), ' ');
    return le64(header.size()) + header + std::string(8, '\0');
}

const std::string kHdf5("\x89HDF\r\n\x1a\n\x00\x00\x00\x00", 12);
// pickle.dumps({}, protocol=4): PROTO 4, FRAME, EMPTY_DICT, STOP.
const std::string kPickle("\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00}\x94.", 14);
// PyTorch's legacy format: PROTO 2, then its magic number as a LONG1 of 10 bytes.
const std::string kTorchLegacy("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
const std::string kNpy = std::string("\x93NUMPY\x01\x00", 8) + "v\x00{'descr': '<f8', ...";

}  // namespace

TEST_CASE("file_kind tells each kind from bytes the test writes", "[io][file_kind]") {
    CHECK(kind_of(safetensors_bytes(56)) == FileKind::safetensors);
    // A 640-byte header's length field starts 0x80 0x02, as a pickle of protocol 2 does.
    const std::string long_header = safetensors_bytes(640);
    REQUIRE(static_cast<unsigned char>(long_header[0]) == 0x80);
    REQUIRE(long_header[1] == '\x02');
    CHECK(kind_of(long_header) == FileKind::safetensors);
    CHECK(kind_of(kNpy) == FileKind::npy);
    CHECK(kind_of(kHdf5) == FileKind::hdf5);
    CHECK(kind_of(kPickle) == FileKind::pickle);
    CHECK(kind_of(kTorchLegacy) == FileKind::torch_legacy);
    CHECK(kind_of(zip_entry("archive/data.pkl", "\x80\x02}q\x00.") +
                  zip_entry("archive/data/0", "0123")) == FileKind::torch_zip);
    CHECK(kind_of(zip_entry("data.pkl", "\x80\x02}.")) == FileKind::torch_zip);
    CHECK(kind_of(zip_entry("a.npy", kNpy) + zip_entry("b.npy", kNpy)) == FileKind::npz);
    // A zip of anything else, or a mix, is no kind a loader could mistake for its own.
    CHECK(kind_of(zip_entry("a.npy", kNpy) + zip_entry("readme.txt", "hello")) ==
          FileKind::unknown);
    CHECK(kind_of(zip_entry("readme.txt", "hello")) == FileKind::unknown);
    CHECK(kind_of("PK\x03\x04 this is a zip archive") == FileKind::unknown);
    CHECK(kind_of("") == FileKind::unknown);
    CHECK(kind_of("\x80") == FileKind::unknown);
    CHECK(kind_of(std::string("\x80\x06\x95", 3)) == FileKind::unknown);  // no protocol 6
    CHECK(kind_of("hello, world") == FileKind::unknown);
    // A header length past the end is no safetensors file, even with the '{'.
    CHECK(kind_of(le64(1000) + "{}") == FileKind::unknown);
}

TEST_CASE("file_kind tells the files torch.save and numpy.savez wrote", "[io][file_kind]") {
    CHECK(kind_of_file(fixture("torch_zip.pt")) == FileKind::torch_zip);
    CHECK(kind_of_file(fixture("torch_legacy.pt")) == FileKind::torch_legacy);
    CHECK(kind_of_file(fixture("arrays.npz")) == FileKind::npz);
    CHECK(kind_of_file((headwise::test::golden_dir() / "npy" / "f8_2x3x4.npy").string()) ==
          FileKind::npy);
#if HEADWISE_TEST_SAFETENSORS
    CHECK(kind_of_file(
              (headwise::test::golden_dir() / "safetensors" / "dtypes.safetensors").string()) ==
          FileKind::safetensors);
#endif
    CHECK(kind_of_file(fixture("no_such_file")) == FileKind::unknown);
}

TEST_CASE("load_npy names a file of another kind and says what to do", "[io][file_kind]") {
    ScratchDir dir("test_file_kind-npy");
    const auto error_of = [&](const std::string& name, const std::string& bytes) {
        const std::string path = dir.file(name);
        write_bytes(path, bytes);
        try {
            headwise::load_npy<double>(path);
        } catch (const std::runtime_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string zip = dir.file("model.pt");
    CHECK(error_of("model.pt", read_bytes(fixture("torch_zip.pt"))) ==
          "headwise::load_npy: " + zip +
              ": is a PyTorch checkpoint (a torch.save zip archive holding data.pkl), not a .npy "
              "file; convert it with tools/export_torch.py: python3 tools/export_torch.py export " +
              zip + " " + dir.file("model.safetensors"));
    const std::string legacy = error_of("legacy.pt", read_bytes(fixture("torch_legacy.pt")));
    CHECK_THAT(legacy, ContainsSubstring(dir.file("legacy.pt")));
    CHECK_THAT(legacy, ContainsSubstring("is a PyTorch checkpoint in the legacy format"));
    CHECK_THAT(legacy, ContainsSubstring("tools/export_torch.py"));
    CHECK(error_of("arrays.npz", read_bytes(fixture("arrays.npz"))) ==
          "headwise::load_npy: " + dir.file("arrays.npz") +
              ": is a NumPy .npz archive (a zip of .npy files, numpy.savez), not a .npy file; "
              "unzip it into a directory and load that with headwise::load_npy_dict");
    const std::string pickle = error_of("x.pkl", kPickle);
    CHECK_THAT(pickle, ContainsSubstring(dir.file("x.pkl") + ": is a Python pickle, not a .npy"));
    CHECK_THAT(pickle, ContainsSubstring("tools/export_torch.py"));
    const std::string hdf5 = error_of("weights.h5", kHdf5);
    CHECK_THAT(hdf5, ContainsSubstring(dir.file("weights.h5") + ": is an HDF5 file"));
    CHECK_THAT(hdf5, ContainsSubstring("headwise does not read HDF5"));
    CHECK(error_of("a.npy", safetensors_bytes(56)) ==
          "headwise::load_npy: " + dir.file("a.npy") +
              ": is a safetensors file, not a .npy file; load it with "
              "headwise::io::load_safetensors");
    // What is no known kind keeps the loader's own message.
    CHECK(error_of("z.npy", "PK\x03\x04 this is a zip archive") ==
          "headwise::load_npy: " + dir.file("z.npy") +
              ": not a .npy file (it does not start with \"\\x93NUMPY\")");
}

#if HEADWISE_TEST_SAFETENSORS
TEST_CASE("load_safetensors names a file of another kind and says what to do", "[io][file_kind]") {
    ScratchDir dir("test_file_kind-safetensors");
    const auto error_of = [&](const std::string& name, const std::string& bytes) {
        const std::string path = dir.file(name);
        write_bytes(path, bytes);
        try {
            headwise::io::load_safetensors<float>(path);
        } catch (const std::runtime_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string zip = dir.file("model.pt");
    // The message of the report that asked for this: "header length 578712552184433488
    // exceeds the limit" for a torch.save file.
    CHECK(error_of("model.pt", read_bytes(fixture("torch_zip.pt"))) ==
          "headwise::io::load_safetensors: " + zip +
              ": is a PyTorch checkpoint (a torch.save zip archive holding data.pkl), not a "
              "safetensors file; convert it with tools/export_torch.py: python3 "
              "tools/export_torch.py export " +
              zip + " " + dir.file("model.safetensors"));
    CHECK(error_of("legacy.bin", read_bytes(fixture("torch_legacy.pt"))) ==
          "headwise::io::load_safetensors: " + dir.file("legacy.bin") +
              ": is a PyTorch checkpoint in the legacy format (torch.save with "
              "_use_new_zipfile_serialization=False, a pickle), not a safetensors file; convert "
              "it with tools/export_torch.py: python3 tools/export_torch.py export " +
              dir.file("legacy.bin") + " " + dir.file("legacy.safetensors"));
    const std::string npz = error_of("arrays.npz", read_bytes(fixture("arrays.npz")));
    CHECK_THAT(npz, ContainsSubstring(dir.file("arrays.npz") + ": is a NumPy .npz archive"));
    CHECK_THAT(npz, ContainsSubstring("not a safetensors file"));
    CHECK_THAT(npz, ContainsSubstring("headwise::load_npy_dict"));
    CHECK(error_of("w.npy", kNpy) ==
          "headwise::io::load_safetensors: " + dir.file("w.npy") +
              ": is a NumPy .npy file, not a safetensors file; load it with headwise::load_npy");
    const std::string hdf5 = error_of("w.h5", kHdf5);
    CHECK_THAT(hdf5, ContainsSubstring(dir.file("w.h5") + ": is an HDF5 file"));
    CHECK_THAT(hdf5, ContainsSubstring("not a safetensors file"));
    // A file named .safetensors gets another name for the converted file.
    const std::string pickle = error_of("model.safetensors", kPickle);
    CHECK_THAT(pickle, ContainsSubstring(dir.file("model.safetensors") + ": is a Python pickle"));
    CHECK_THAT(pickle,
               ContainsSubstring("tools/export_torch.py export " + dir.file("model.safetensors") +
                                 " " + dir.file("model.converted.safetensors")));

    // In memory, the name given stands for the file.
    const std::string st = read_bytes(fixture("torch_legacy.pt"));
    std::string parsed = "no error";
    try {
        headwise::io::parse_safetensors<double>(reinterpret_cast<const std::uint8_t*>(st.data()),
                                                st.size(), "ck.pt");
    } catch (const std::runtime_error& e) {
        parsed = e.what();
    }
    CHECK_THAT(parsed, StartsWith("headwise::io::parse_safetensors: ck.pt: is a PyTorch "
                                  "checkpoint in the legacy format"));

    // Loaders built on load_safetensors say the same: a training checkpoint.
    std::string checkpoint = "no error";
    try {
        headwise::io::load_checkpoint<float>(zip);
    } catch (const std::runtime_error& e) {
        checkpoint = e.what();
    }
    CHECK_THAT(checkpoint, StartsWith("headwise::io::load_safetensors: " + zip +
                                      ": is a PyTorch checkpoint (a torch.save zip archive"));

    // A real safetensors file whose length field looks like a pickle's start still loads.
    const std::string path = dir.file("long_header.safetensors");
    write_bytes(path, safetensors_bytes(640));
    const auto sd = headwise::io::load_safetensors<float>(path);
    REQUIRE(sd.size() == 1);
    CHECK(sd.at("a").shape() == headwise::Shape{2});
}
#endif

}  // namespace test_file_kind
