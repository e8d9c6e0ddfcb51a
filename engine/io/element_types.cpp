#include "engine/io/element_types.h"

#include <glm/gtc/packing.hpp>

#include <bit>
#include <cstdint>
#include <cstring>

#include "vkattn/errors.h"

namespace vkattn::io {

static_assert(std::endian::native == std::endian::little, "the readers assume a little-endian host");

size_t stored_size(StoredType type) {
  switch (type) {
    case StoredType::float32: return 4;
    case StoredType::float16: return 2;
    case StoredType::bfloat16: return 2;
    case StoredType::float64: return 8;
    case StoredType::boolean: return 1;
    case StoredType::int32: return 4;
    case StoredType::int64: return 8;
  }
  return 0;
}

const char* stored_type_name(StoredType type) {
  switch (type) {
    case StoredType::float32: return "float32";
    case StoredType::float16: return "float16";
    case StoredType::bfloat16: return "bfloat16";
    case StoredType::float64: return "float64";
    case StoredType::boolean: return "bool";
    case StoredType::int32: return "int32";
    case StoredType::int64: return "int64";
  }
  return "?";
}

DType engine_dtype(StoredType type) {
  switch (type) {
    case StoredType::boolean: return DType::boolean;
    case StoredType::int32:
    case StoredType::int64: return DType::int64;
    default: return DType::float32;
  }
}

Narrow narrow_type(StoredType type) {
  return type == StoredType::float16 ? Narrow::float16 : type == StoredType::bfloat16 ? Narrow::bfloat16 : Narrow::none;
}

// An integer element as a float, exactly: |v| <= 2^24, the largest range float32 holds without gaps.
static float exact_integer(int64_t v, size_t index, const std::string& context) {
  constexpr int64_t kLimit = int64_t{1} << 24;
  if (v > kLimit || v < -kLimit) {
    throw FileError(context + ": integer element " + std::to_string(index) + " holds " + std::to_string(v) +
                    ", beyond the ±2^24 (16777216) that vkattn stores exactly");
  }
  return static_cast<float>(v);
}

template <typename T>
static T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

std::vector<float> decode_elements(StoredType type, std::span<const std::byte> bytes, const std::string& context) {
  const size_t width = stored_size(type);
  const size_t n = bytes.size() / width;
  std::vector<float> out(n);
  const std::byte* p = bytes.data();
  for (size_t i = 0; i < n; ++i, p += width) {
    switch (type) {
      case StoredType::float32: out[i] = load<float>(p); break;
      case StoredType::float16: out[i] = glm::unpackHalf1x16(load<uint16_t>(p)); break;
      // bfloat16 is the top half of a float32.
      case StoredType::bfloat16: out[i] = std::bit_cast<float>(uint32_t{load<uint16_t>(p)} << 16); break;
      case StoredType::float64: out[i] = static_cast<float>(load<double>(p)); break;
      case StoredType::boolean: {
        auto v = std::to_integer<unsigned>(*p);
        if (v > 1) {
          throw FileError(context + ": bool element " + std::to_string(i) + " holds " + std::to_string(v) +
                          ", not 0 or 1");
        }
        out[i] = static_cast<float>(v);
        break;
      }
      case StoredType::int32: out[i] = exact_integer(load<int32_t>(p), i, context); break;
      case StoredType::int64: out[i] = exact_integer(load<int64_t>(p), i, context); break;
    }
  }
  return out;
}

}  // namespace vkattn::io
