#pragma once
// Float tensors rounded to float16 or bfloat16 (to nearest even: the reference's round_to), marked
// so (Tensor::narrow) as a 16-bit checkpoint's weights are: what Backend::upload_matrix keeps 16-bit.
#include <cstdint>

#include "reference/reference.h"
#include "vkattn/tensor.h"

namespace vkattn::testing {

inline uint16_t bfloat16_bits(float value) { return static_cast<uint16_t>(reference::narrow_bits(value, 2)); }

inline Tensor rounded_to(Tensor t, Narrow narrow) {
  for (float& v : t.data) v = reference::round_to(v, static_cast<int>(narrow));
  t.narrow = narrow;
  return t;
}

}  // namespace vkattn::testing
