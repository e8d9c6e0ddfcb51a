#pragma once
// The element types vkattn's readers accept, and their conversion to the engine's float32.
// Every file format stores little-endian; so do the hosts vkattn builds for (static_assert).
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "vkattn/tensor.h"

namespace vkattn::io {

enum class StoredType { float32, float16, bfloat16, float64, boolean, int32, int64 };

// Bytes per element.
size_t stored_size(StoredType type);
// "float32", "float16", "bfloat16", "float64", "bool", "int32", "int64".
const char* stored_type_name(StoredType type);
// The engine dtype a stored type becomes: boolean for bool, int64 for every integer type,
// float32 for every float.
DType engine_dtype(StoredType type);
// The 16-bit type a stored float16 or bfloat16 stays exactly when widened (Tensor::narrow), or none.
Narrow narrow_type(StoredType type);

// Converts `bytes` (a whole number of elements) to floats. A bool byte other than 0 or 1 is a
// FileError "CONTEXT: bool element N holds V, not 0 or 1"; an integer beyond ±2^24 (float32
// would round it) is a FileError too.
std::vector<float> decode_elements(StoredType type, std::span<const std::byte> bytes, const std::string& context);

}  // namespace vkattn::io
