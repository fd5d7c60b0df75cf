// SPDX-License-Identifier: MIT
// NumPy .npy files: load and save tensors, and directories holding one .npy per state-dict entry.
#pragma once

#include <algorithm>     // std::min
#include <cmath>         // std::isfinite, std::fabs, std::signbit
#include <cstddef>       // std::size_t
#include <cstdint>       // std::uint16_t, std::uint32_t, std::uint64_t
#include <cstring>       // std::memcpy
#include <filesystem>    // std::filesystem::path, directory_iterator, create_directories
#include <fstream>       // std::ifstream
#include <ios>           // std::ios, std::streamoff, std::streamsize
#include <istream>       // std::istream
#include <limits>        // std::numeric_limits
#include <map>           // std::map
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code
#include <type_traits>   // std::is_same_v, std::is_const_v, std::enable_if_t
#include <utility>       // std::move
#include <vector>        // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/atomic_file.hpp"
#include "detail/file_kind.hpp"
#include "detail/npy_format.hpp"
#include "npy_header.hpp"

namespace headwise {

// ---- declarations ----------------------------------------------------------------------------

/// Reads and parses the header of a .npy file without reading its data, e.g. to learn whether a
/// file holds a mask ('|b1') or values ('<f4', '<f8'). Throws std::runtime_error naming the path
/// when the file cannot be read or is not a well-formed .npy file.
NpyHeader read_npy_header(const std::string& path);

/// Loads a C-order, little-endian .npy file of format version 1.0, 2.0 or 3.0.
/// - Tensor<float>, Tensor<double>: from '<f4' (float32) or '<f8' (float64); values convert
///   between the two, so float64 weights exported from PyTorch load straight into Tensor<float>.
///   '<f4' into float and '<f8' into double keep every bit, NaN payloads and signalling NaNs
///   included; the conversions may return a NaN quieted.
/// - Tensor<bool>: from '|b1' (np.bool_) only.
/// Throws std::runtime_error naming the function, the path and what is wrong: missing file,
/// malformed header, unsupported or big-endian dtype, Fortran order, truncated or overlong data.
/// A file of another kind (a safetensors file, a NumPy .npz, a PyTorch checkpoint, a pickle, an
/// HDF5 file) is named as such, with what to do instead (detail/file_kind.hpp).
template <class T>
Tensor<T> load_npy(const std::string& path);

/// Saves a tensor as a .npy file (format 1.0, C order, little-endian; '<f4', '<f8' or '|b1'
/// by element type, every bit as it is in memory) that numpy.load reads. The save is atomic:
/// the file is written under a temporary name in the same directory, flushed to the disk and
/// renamed over `path`, so a save that fails leaves the previous file byte-identical and no
/// temporary file behind. Throws std::runtime_error naming the path when writing fails.
template <class T>
void save_npy(const std::string& path, TensorView<const T> tensor);
template <class T>
void save_npy(const std::string& path, const Tensor<T>& tensor);
template <class T, class = std::enable_if_t<!std::is_const_v<T>>>
void save_npy(const std::string& path, TensorView<T> tensor);

/// Loads every regular file named "*.npy" directly inside `dir` (not recursively), keyed by the
/// file name without ".npy": a PyTorch state dict saved as one file per key
/// ("out_proj.weight.npy", ...) loads under the keys PyTorch uses. Other files are ignored.
template <class T>
std::map<std::string, Tensor<T>> load_npy_dict(const std::string& dir);

/// Saves each entry as "<dir>/<key>.npy", creating `dir` when needed. Keys must be file names:
/// non-empty, without '/' or '\\', not "." or ".." (std::invalid_argument otherwise, before
/// anything is written).
template <class T>
void save_npy_dict(const std::string& dir, const std::map<std::string, Tensor<T>>& tensors);

// ---- definitions -----------------------------------------------------------------------------

inline NpyHeader read_npy_header(const std::string& path) {
    constexpr const char* kFunction = "headwise::read_npy_header";
    std::ifstream in = io::detail::npy::open_for_reading(kFunction, path);
    return io::detail::npy::read_header(kFunction, path, in);
}

template <class T>
Tensor<T> load_npy(const std::string& path) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bool>,
                  "headwise::load_npy loads Tensor<float>, Tensor<double> or Tensor<bool>");
    namespace npy = io::detail::npy;
    constexpr const char* kFunction = "headwise::load_npy";

    std::ifstream in = npy::open_for_reading(kFunction, path);
    const NpyHeader header = npy::read_header(kFunction, path, in);
    const npy::Dtype dtype = npy::parse_dtype(kFunction, path, header.descr);
    if constexpr (std::is_same_v<T, bool>) {
        if (dtype != npy::Dtype::b1)
            npy::fail(kFunction, path,
                      "dtype '" + header.descr +
                          "' does not load into Tensor<bool>; masks are stored as '|b1' "
                          "(np.bool_)");
    } else if (dtype == npy::Dtype::b1) {
        npy::fail(kFunction, path,
                  std::string("dtype '|b1' (bool) does not load into Tensor<") +
                      npy::scalar_name<T>() + ">; load it as Tensor<bool>");
    }
    // Rank 0 and 1 arrays have the same layout in either order.
    if (header.fortran_order && header.shape.rank() >= 2)
        npy::fail(kFunction, path,
                  "fortran_order is True, but headwise reads C-order (row-major) arrays only; "
                  "save np.ascontiguousarray(a) instead");

    // Compare the data size with what the file holds before allocating anything.
    const std::size_t item = npy::item_size(dtype);
    std::uint64_t needed = item;
    for (const Index extent : header.shape) {
        const auto e = static_cast<std::uint64_t>(extent);
        if (e != 0 && needed > std::numeric_limits<std::uint64_t>::max() / e)
            npy::fail(kFunction, path,
                      "the byte count of shape " + header.shape.str() + " of '" + header.descr +
                          "' overflows 64 bits");
        needed *= e;
    }
    const std::streamoff data_start = in.tellg();
    in.seekg(0, std::ios::end);
    const std::streamoff file_end = in.tellg();
    in.seekg(data_start);
    if (data_start < 0 || file_end < data_start || !in)
        npy::fail(kFunction, path, "cannot determine the file size");
    const auto available = static_cast<std::uint64_t>(file_end - data_start);
    const std::string what_header = "shape " + header.shape.str() + " of '" + header.descr + "'";
    if (available < needed)
        npy::fail(kFunction, path,
                  "data is truncated: the header's " + what_header + " needs " +
                      std::to_string(needed) + " bytes, the file holds " +
                      std::to_string(available));
    if (available > needed)
        npy::fail(kFunction, path,
                  std::to_string(available - needed) + " unexpected bytes follow the " +
                      std::to_string(needed) + " bytes of data the header's " + what_header +
                      " describes");

    Tensor<T> tensor(header.shape);
    std::vector<unsigned char> buffer(
        static_cast<std::size_t>(std::min<std::uint64_t>(npy::kChunkBytes, needed)));
    const Index per_chunk = static_cast<Index>(npy::kChunkBytes / item);
    for (Index done = 0; done < tensor.numel();) {
        const Index count = std::min(per_chunk, tensor.numel() - done);
        if (!in.read(reinterpret_cast<char*>(buffer.data()),
                     static_cast<std::streamsize>(static_cast<std::size_t>(count) * item)))
            npy::fail(kFunction, path, "read error in the data");
        const Index bad = npy::decode(dtype, buffer.data(), count, tensor.data() + done);
        if (bad >= 0)
            npy::fail(kFunction, path,
                      "element " + std::to_string(done + bad) + " of the '|b1' data is byte " +
                          std::to_string(buffer[static_cast<std::size_t>(bad)]) + ", not 0 or 1");
        done += count;
    }
    return tensor;
}

template <class T>
void save_npy(const std::string& path, TensorView<const T> tensor) {
    io::detail::npy::save<T>(path, tensor, ::headwise::detail::SystemWrite());
}

template <class T>
void save_npy(const std::string& path, const Tensor<T>& tensor) {
    save_npy<T>(path, tensor.view());
}

template <class T, class>
void save_npy(const std::string& path, TensorView<T> tensor) {
    save_npy<T>(path, TensorView<const T>(tensor));
}

template <class T>
std::map<std::string, Tensor<T>> load_npy_dict(const std::string& dir) {
    constexpr const char* kFunction = "headwise::load_npy_dict";
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) io::detail::npy::fail(kFunction, dir, "not a directory");
    std::map<std::string, Tensor<T>> tensors;
    fs::directory_iterator it(dir, ec);
    if (ec)
        io::detail::npy::fail(kFunction, dir, "cannot list the directory (" + ec.message() + ")");
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        const fs::path& file = it->path();
        if (file.extension() != ".npy" || !fs::is_regular_file(file, ec)) continue;
        tensors.emplace(file.stem().string(), load_npy<T>(file.string()));
    }
    if (ec)
        io::detail::npy::fail(kFunction, dir, "cannot list the directory (" + ec.message() + ")");
    return tensors;
}

template <class T>
void save_npy_dict(const std::string& dir, const std::map<std::string, Tensor<T>>& tensors) {
    constexpr const char* kFunction = "headwise::save_npy_dict";
    namespace fs = std::filesystem;
    for (const auto& entry : tensors)
        if (!io::detail::npy::is_file_name(entry.first))
            throw_invalid_argument(kFunction, "tensors",
                                   "keys must be file names (non-empty, no '/' or '\\', not "
                                   "'.' or '..')",
                                   "'" + entry.first + "'");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
        io::detail::npy::fail(kFunction, dir, "cannot create the directory (" + ec.message() + ")");
    for (const auto& [key, tensor] : tensors)
        save_npy<T>((fs::path(dir) / (key + ".npy")).string(), tensor.view());
}

}  // namespace headwise
