#include <algorithm>
#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

void attention_combine(const float* partials, float* out, int64_t R, int64_t parts, int64_t d) {
  for (int64_t r = 0; r < R; ++r) {
    const float* row = partials + r * parts * (d + 2);
    float m = -1e30f;  // the largest max of a part that saw a key
    for (int64_t p = 0; p < parts; ++p)
      if (row[p * (d + 2) + d + 1] > 0.0f) m = std::max(m, row[p * (d + 2) + d]);
    float l = 0.0f;
    for (int64_t p = 0; p < parts; ++p) l += row[p * (d + 2) + d + 1] * std::exp(row[p * (d + 2) + d] - m);
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int64_t p = 0; p < parts; ++p) acc += row[p * (d + 2) + c] * std::exp(row[p * (d + 2) + d] - m);
      out[r * d + c] = l > 0.0f ? acc / l : 0.0f;
    }
  }
}

}  // namespace vkattn::reference
