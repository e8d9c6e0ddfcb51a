#pragma once
// Float tensors rounded to float16 or bfloat16 (to nearest even), marked so (Tensor::narrow) as a
// 16-bit checkpoint's weights are: what Backend::upload_matrix keeps 16-bit.
#include <glm/gtc/packing.hpp>

#include <bit>
#include <cstdint>

#include "vkattn/tensor.h"

namespace vkattn::testing {

inline uint16_t bfloat16_bits(float value) {
  const auto bits = std::bit_cast<uint32_t>(value);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

inline Tensor rounded_to(Tensor t, Narrow narrow) {
  for (float& v : t.data) {
    v = narrow == Narrow::float16    ? glm::unpackHalf1x16(glm::packHalf1x16(v))
        : narrow == Narrow::bfloat16 ? std::bit_cast<float>(uint32_t{bfloat16_bits(v)} << 16)
                                     : v;
  }
  t.narrow = narrow;
  return t;
}

}  // namespace vkattn::testing
