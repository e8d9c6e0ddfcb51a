#include <cmath>
#include <limits>

#include "reference/reference.h"

namespace vkattn::reference {

// y[r, :] = exp(x[r, :] - max) / Σ exp(x[r, :] - max)     x, y (R, S)
// A fully masked row (every score -inf) gives zeros, not NaN: PyTorch's safe softmax.
void softmax(const float* x, float* y, int64_t R, int64_t S) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < R; ++r) {
    const float* in = x + r * S;
    float* out = y + r * S;
    // pass 1: max
    float row_max = neg_inf;
    for (int64_t j = 0; j < S; ++j) row_max = std::fmax(row_max, in[j]);
    if (row_max == neg_inf) {
      for (int64_t j = 0; j < S; ++j) out[j] = 0.0f;
      continue;
    }
    // pass 2: sum of exp
    float sum = 0.0f;
    for (int64_t j = 0; j < S; ++j) sum += std::exp(in[j] - row_max);
    // pass 3: normalise
    float inv_sum = 1.0f / sum;
    for (int64_t j = 0; j < S; ++j) out[j] = std::exp(in[j] - row_max) * inv_sum;
  }
}

}  // namespace vkattn::reference
