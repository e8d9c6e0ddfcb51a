#pragma once
// NumPy's .npy format (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
// Read: format versions 1.0, 2.0 and 3.0; C order; little-endian float32 ('<f4'), float16
// ('<f2') and float64 ('<f8'), converted to float32, bool ('|b1') for masks, and int32 / int64
// ('<i4', '<i8') for token ids (dtype int64, refused beyond ±2^24). Anything else —
// Fortran order, big-endian, object or structured arrays, other dtypes, a malformed header,
// truncated or trailing data — is a FileError "PATH: <the problem>".
// Write: float32 as '<f4', bool as '|b1', int64 as '<i8', version 1.0 (2.0 when the header needs it).
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "vkattn/tensor.h"

namespace vkattn::io {

// `source` names the bytes in error messages (the path, usually).
Tensor parse_npy(std::span<const std::byte> bytes, const std::string& source);
Tensor read_npy(const std::filesystem::path& path);

std::vector<std::byte> encode_npy(const Tensor& tensor);
// All or nothing: written to a temporary beside `path`, renamed into place when complete.
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace vkattn::io
