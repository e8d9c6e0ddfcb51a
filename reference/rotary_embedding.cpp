#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

float rotary_inverse_frequency(int64_t i, int64_t rotary_dims, float theta) {
  // torch: 1.0 / (theta ** (torch.arange(0, r, 2).float() / r)), in float32
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dims);
  return 1.0f / std::pow(theta, exponent);
}

// x, y (N, T, d), N = B·H: row t is position offset + t. Pair i < r/2 of a row, (a, b), becomes
// (a·cos φ − b·sin φ, a·sin φ + b·cos φ) with φ = position · inv_freq[i], φ in float32 as torch
// computes it; features r … d−1 are copied.
//   half:  a = x[i], b = x[i + r/2]        pairs: a = x[2i], b = x[2i + 1]
void rotary_embedding(const float* x, const float* inv_freq, float* y, int64_t N, int64_t T, int64_t d,
                      int64_t offset, int64_t rotary_dims, bool pairs) {
  const int64_t half = rotary_dims / 2;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = x + (n * T + t) * d;
      float* out = y + (n * T + t) * d;
      for (int64_t f = rotary_dims; f < d; ++f) out[f] = row[f];
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(offset + t) * inv_freq[i];
        const auto c = static_cast<float>(std::cos(static_cast<double>(angle)));
        const auto s = static_cast<float>(std::sin(static_cast<double>(angle)));
        const int64_t first = pairs ? 2 * i : i, second = pairs ? 2 * i + 1 : i + half;
        const float a = row[first], b = row[second];
        out[first] = a * c - b * s;
        out[second] = a * s + b * c;
      }
    }
}

}  // namespace vkattn::reference
