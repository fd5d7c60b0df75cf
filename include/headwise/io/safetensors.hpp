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

#include <algorithm>     // std::sort
#include <cmath>         // std::ldexp
#include <cstdint>       // std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t
#include <cstring>       // std::memcpy, std::memchr
#include <filesystem>    // std::filesystem::is_directory, is_regular_file, exists
#include <fstream>       // std::ifstream
#include <ios>           // std::ios, std::ios_base::failure
#include <limits>        // std::numeric_limits
#include <map>           // std::map
#include <memory>        // std::unique_ptr
#include <set>           // std::set
#include <stdexcept>     // std::runtime_error, std::invalid_argument
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code
#include <type_traits>   // std::is_same_v, std::conditional_t
#include <utility>       // std::move
#include <vector>        // std::vector

#if __has_include(<sys/mman.h>) && __has_include(<sys/stat.h>) && __has_include(<fcntl.h>) && \
    __has_include(<unistd.h>)
#include <fcntl.h>     // ::open, O_RDONLY, O_CLOEXEC
#include <sys/mman.h>  // ::mmap, ::munmap
#include <sys/stat.h>  // ::fstat, S_ISREG
#include <unistd.h>    // ::close
#define HEADWISE_SAFETENSORS_MMAP 1
#else
#define HEADWISE_SAFETENSORS_MMAP 0
#endif

#include "../config.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/atomic_file.hpp"
#include "detail/file_kind.hpp"
#include "detail/safetensors_format.hpp"

namespace headwise::io {

// ---- declarations ----------------------------------------------------------------------------

/// Loads every tensor of a safetensors file (https://github.com/huggingface/safetensors: an
/// 8-byte little-endian header length N, N bytes of JSON {"name": {"dtype", "shape",
/// "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data). F32 and F64 tensors
/// load into either scalar type; BF16 and F16 are converted. F32 into float and F64 into double
/// keep every bit, NaN payloads and signalling NaNs included; a conversion (F32 into double, F64
/// into float, BF16, F16) may return a NaN quieted or without its payload. Integer entries (I8,
/// U8, I16, U16, I32, U32, I64, U64; BOOL as 0 and 1), such as the int64 buffers of index
/// positions that PyTorch checkpoints hold, load as T when every value is exactly representable
/// in T (float: up to 2^24 in magnitude, or a multiple of a power of two that fits 24 bits) and
/// throw naming the entry, the index and the value otherwise; a BOOL byte other than 0 and 1
/// throws too. F8 dtypes are not read. Validation is strict
/// and checked before anything is returned: `path` a regular file, the header length within the
/// file, well-formed JSON with no name or key declared twice and at most 16 levels of arrays and
/// objects, followed by nothing but the spaces that pad it; every entry an object with a known
/// dtype, a shape of non-negative integers whose byte count fits in 64 bits, data_offsets in
/// range with a byte count equal to numel * the dtype's size, entries neither overlapping nor
/// leaving gaps. Any problem throws std::runtime_error whose what() names the function, the file
/// and the entry, quoting at most 80 bytes of any value it echoes:
///   "headwise::io::load_safetensors: model.safetensors: entry 'linear1.weight': data_offsets
///    [0, 60] hold 60 bytes, but F32 [4, 4] needs 64"
/// A file of another kind is recognised by its first bytes before anything is parsed (a PyTorch
/// checkpoint, zip or legacy, another pickle, a NumPy .npy or .npz, an HDF5 file) and the
/// error says what it is and what to do (detail/file_kind.hpp):
///   "headwise::io::load_safetensors: model.pt: is a PyTorch checkpoint (a torch.save zip
///    archive holding data.pkl), not a safetensors file; convert it with tools/export_torch.py:
///    python3 tools/export_torch.py export model.pt model.safetensors"
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

/// Writes `tensors` as a safetensors file (F32 for float, F64 for double, every bit as it is in
/// memory), entries in name order, the header padded with spaces to a multiple of 8 bytes,
/// optional string `metadata` under "__metadata__". The save is atomic: the file is written
/// under a temporary name in the same directory, flushed to the disk and renamed over `path`, so
/// a save that fails leaves the previous file byte-identical and no temporary file behind.
/// Throws std::invalid_argument, before anything is written, for an empty name, one that is
/// "__metadata__", or a name or metadata key or value that is not valid UTF-8 (JSON text must
/// be); std::runtime_error naming the file when writing fails.
template <class T>
void save_safetensors(const std::string& path, const std::map<std::string, Tensor<T>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// ---- definitions -----------------------------------------------------------------------------

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
    detail::safetensors::save(path, tensors, metadata, ::headwise::detail::SystemWrite());
}

}  // namespace headwise::io
