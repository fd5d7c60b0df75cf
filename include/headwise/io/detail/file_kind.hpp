// SPDX-License-Identifier: MIT
// What a weight file is, from its first bytes, so that a loader given the wrong kind says so; and
// what a path names when it is no regular file, so that readers and savers refuse it.
#pragma once

#include <cstddef>       // std::size_t
#include <cstdint>       // std::uint8_t, std::uint64_t
#include <cstring>       // std::memcmp
#include <filesystem>    // std::filesystem::path, status, symlink_status
#include <fstream>       // std::ifstream
#include <ios>           // std::ios, std::streamsize
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code
#include <vector>        // std::vector

namespace headwise::detail {

/// What `path` names when that is neither a regular file nor nothing: "a directory", "a FIFO",
/// "a socket", "a character device", "a block device" or "a file of unknown type", preceded by
/// "a symbolic link to " when `path` is a symbolic link to one. Empty for a regular file (or a
/// symbolic link to one) and for a path that names nothing (or a symbolic link that leads
/// nowhere). Looks only at the directory entries (stat), never opens the file: opening a FIFO
/// blocks until a writer comes.
std::string special_file_kind(const std::string& path);

/// The kinds of file a user may hand to a loader by mistake, told apart by their first bytes.
/// `unknown` means nothing was recognised for certain: the loader's own checks then speak.
enum class FileKind {
    unknown,
    safetensors,   // 8-byte little-endian header length, then a JSON object
    npy,           // "\x93NUMPY"
    npz,           // a zip archive of .npy entries (numpy.savez)
    torch_zip,     // torch.save since PyTorch 1.6: a zip archive holding <name>/data.pkl
    torch_legacy,  // torch.save(..., _use_new_zipfile_serialization=False): a pickle, protocol 2,
                   // that starts with PyTorch's magic number
    pickle,        // any other pickle of protocol 2 to 5 (pickle.dump, torch.save of old days)
    hdf5,          // "\x89HDF\r\n\x1a\n" (Keras .h5 weights)
};

/// How many leading bytes file_kind() needs at most: a zip's first entries and their names, a
/// pickle's magic number and a safetensors header's first byte all lie well within them.
inline constexpr std::size_t kFileKindPrefix = 4096;

/// The kind of the file whose first `size` bytes are `data`; `file_size` is the whole file's
/// size (for a safetensors header length, which must fit in the file).
FileKind file_kind(const std::uint8_t* data, std::size_t size, std::uint64_t file_size);

/// The first kFileKindPrefix bytes of `path` (fewer for a shorter file, none when it cannot be
/// read) and the file's size.
std::vector<std::uint8_t> read_file_prefix(const std::string& path, std::uint64_t& file_size);

/// For a loader of `expected` files (safetensors or npy) given a file of kind `kind`: what the
/// file is and what to do with it, to follow "<function>: <path>: "; empty when `kind` is
/// `expected` or `unknown`.
std::string foreign_file_message(FileKind kind, FileKind expected, const std::string& path);

// ---- definitions -----------------------------------------------------------------------------

namespace file_kind_impl {

inline std::uint64_t load_le(const std::uint8_t* p, std::size_t bytes) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    return v;
}

inline bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// A zip archive (PKWARE APPNOTE 4.3.7): walks the local file headers that lie within the
/// prefix. PyTorch writes "<archive>/data.pkl" first; numpy.savez writes only "<key>.npy"
/// entries. Anything else (or a header the prefix cuts) stays `unknown`.
inline FileKind zip_kind(const std::uint8_t* data, std::size_t size) {
    std::size_t at = 0;
    bool only_npy = false;
    for (int entry = 0; entry < 64; ++entry) {
        if (size - at < 30 || std::memcmp(data + at, "PK\x03\x04", 4) != 0) break;
        const std::uint64_t flags = load_le(data + at + 6, 2);
        const std::uint64_t compressed = load_le(data + at + 18, 4);
        const std::size_t name_length = static_cast<std::size_t>(load_le(data + at + 26, 2));
        const std::size_t extra_length = static_cast<std::size_t>(load_le(data + at + 28, 2));
        if (size - at - 30 < name_length) break;
        const std::string name(reinterpret_cast<const char*>(data + at + 30), name_length);
        if (name == "data.pkl" || ends_with(name, "/data.pkl")) return FileKind::torch_zip;
        only_npy = ends_with(name, ".npy") && (entry == 0 || only_npy);
        // Bit 3: the sizes follow the data instead, so the next header cannot be found here.
        if (flags & 0x8u) break;
        const std::uint64_t next = at + 30 + name_length + extra_length + compressed;
        if (next >= size) break;
        at = static_cast<std::size_t>(next);
    }
    return only_npy ? FileKind::npz : FileKind::unknown;
}

/// The output name suggested for a conversion: the input's with the extension .safetensors.
inline std::string converted_name(const std::string& path) {
    std::filesystem::path out(path);
    if (out.extension() == ".safetensors")
        return out.replace_extension(".converted.safetensors").string();
    return out.replace_extension(".safetensors").string();
}

}  // namespace file_kind_impl

inline std::string special_file_kind(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);  // follows symbolic links
    std::string kind;
    switch (st.type()) {
        case fs::file_type::directory:
            kind = "a directory";
            break;
        case fs::file_type::fifo:
            kind = "a FIFO";
            break;
        case fs::file_type::socket:
            kind = "a socket";
            break;
        case fs::file_type::character:
            kind = "a character device";
            break;
        case fs::file_type::block:
            kind = "a block device";
            break;
        case fs::file_type::unknown:
            kind = "a file of unknown type";
            break;
        default:
            return "";  // regular, not found, or not statable (the open then says why)
    }
    if (fs::is_symlink(fs::symlink_status(path, ec))) kind = "a symbolic link to " + kind;
    return kind;
}

inline FileKind file_kind(const std::uint8_t* data, std::size_t size, std::uint64_t file_size) {
    using file_kind_impl::load_le;
    // safetensors first: the length field of a header of 640 to 1408 bytes starts 0x80
    // 0x02..0x05, as a pickle does, but a pickle's byte 8 is not the '{' that opens the header.
    if (size >= 9 && data[8] == '{' && load_le(data, 8) <= file_size - 8)
        return FileKind::safetensors;
    if (size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0) return FileKind::npy;
    if (size >= 8 && std::memcmp(data, "\x89HDF\r\n\x1a\n", 8) == 0) return FileKind::hdf5;
    if (size >= 4 && std::memcmp(data, "PK\x03\x04", 4) == 0)
        return file_kind_impl::zip_kind(data, size);
    if (size >= 3 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5) {
        // PROTO 2, LONG1 of 10 bytes: PyTorch's magic number 0x1950a86a20f9469cfc6c.
        static const std::uint8_t kTorchMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                                   0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
        if (size >= sizeof kTorchMagic && std::memcmp(data, kTorchMagic, sizeof kTorchMagic) == 0)
            return FileKind::torch_legacy;
        return FileKind::pickle;
    }
    return FileKind::unknown;
}

inline std::vector<std::uint8_t> read_file_prefix(const std::string& path,
                                                  std::uint64_t& file_size) {
    file_size = 0;
    std::error_code ec;
    const std::uintmax_t total = std::filesystem::file_size(path, ec);
    if (ec) return {};
    file_size = static_cast<std::uint64_t>(total);
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(
        total < kFileKindPrefix ? total : static_cast<std::uintmax_t>(kFileKindPrefix)));
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    bytes.resize(static_cast<std::size_t>(in.gcount()));
    return bytes;
}

inline std::string foreign_file_message(FileKind kind, FileKind expected, const std::string& path) {
    if (kind == expected || kind == FileKind::unknown) return "";
    const std::string not_this =
        expected == FileKind::npy ? ", not a .npy file" : ", not a safetensors file";
    const std::string convert =
        "convert it with tools/export_torch.py: python3 "
        "tools/export_torch.py export " +
        path + " " + file_kind_impl::converted_name(path);
    switch (kind) {
        case FileKind::torch_zip:
            return "is a PyTorch checkpoint (a torch.save zip archive holding data.pkl)" +
                   not_this + "; " + convert;
        case FileKind::torch_legacy:
            return "is a PyTorch checkpoint in the legacy format (torch.save with "
                   "_use_new_zipfile_serialization=False, a pickle)" +
                   not_this + "; " + convert;
        case FileKind::pickle:
            return "is a Python pickle" + not_this +
                   "; if torch.save or pickle.dump wrote it from tensors or a module, " + convert;
        case FileKind::npz:
            return "is a NumPy .npz archive (a zip of .npy files, numpy.savez)" + not_this +
                   "; unzip it into a directory and load that with headwise::load_npy_dict";
        case FileKind::npy:
            return "is a NumPy .npy file" + not_this + "; load it with headwise::load_npy";
        case FileKind::hdf5:
            return "is an HDF5 file (e.g. Keras .h5 weights)" + not_this +
                   "; headwise does not read HDF5: save the arrays with numpy.save and load "
                   "them with headwise::load_npy_dict, or as safetensors";
        case FileKind::safetensors:
            return "is a safetensors file" + not_this +
                   "; load it with headwise::io::load_safetensors";
        case FileKind::unknown:
            break;
    }
    return "";
}

}  // namespace headwise::detail
