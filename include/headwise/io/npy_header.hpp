// SPDX-License-Identifier: MIT
// NpyHeader: what the header of a .npy file says (read_npy_header, io/npy.hpp).
#pragma once

#include <string>  // std::string

#include "../config.hpp"
#include "../shape.hpp"

namespace headwise {

/// What the header of a .npy file says, as read by read_npy_header().
struct NpyHeader {
    std::string descr;           // NumPy dtype string as written: "<f4", "<f8", "|b1", ">f8", ...
    bool fortran_order = false;  // true: column-major data (load_npy rejects it for rank >= 2)
    Shape shape;                 // extents; rank 0 for a NumPy scalar array
    int major_version = 1;       // format version 1, 2 or 3 (they differ in header length width)
    Index data_offset = 0;       // bytes from the start of the file to the first element
};

}  // namespace headwise
