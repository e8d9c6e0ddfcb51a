#pragma once
// The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {"key": "value"}}, then the data buffer the offsets index.
// Read strictly, as the reference implementation does: F32, F16, BF16 and F64 (converted to
// float32) and BOOL; the header length within the file; the header a JSON object; every tensor's
// offsets inside the buffer, matching shape × dtype size, without overlaps or gaps; no bytes
// left unindexed. Each violation is a FileError "PATH: <the problem>" naming the tensor.
#include <cstddef>
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "vkattn/tensor.h"

namespace vkattn::io {

struct Safetensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"; safetensors keeps strings only
  std::map<std::string, std::string> stored_dtypes;  // each tensor's dtype in the file: "F32", "BF16", …
};

// `source` names the bytes in error messages (the path, usually).
Safetensors parse_safetensors(std::span<const std::byte> bytes, const std::string& source);
Safetensors read_safetensors(const std::filesystem::path& path);

}  // namespace vkattn::io
