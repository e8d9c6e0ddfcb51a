#pragma once
// Float tensors rounded to float16 or bfloat16 (to nearest even: the reference's round_to), marked
// so (Tensor::narrow) as a 16-bit checkpoint's weights are: what Backend::upload_matrix keeps 16-bit.
#include <cstdint>

#include "reference/reference.h"
#include "vkattn/tensor.h"

namespace vkattn::testing {

inline Tensor rounded_to(Tensor t, Narrow narrow) {
  for (float& v : t.data) v = reference::round_to(v, static_cast<int>(narrow));
  t.narrow = narrow;
  return t;
}

}  // namespace vkattn::testing
