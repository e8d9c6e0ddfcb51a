#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

float rotary_inverse_frequency(int64_t i, int64_t rotary_dims, float theta) {
  // torch: 1.0 / (theta ** (torch.arange(0, r, 2).float() / r)), in float32
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dims);
  return 1.0f / std::pow(theta, exponent);
}

float rotary_llama3_frequency(float inv_freq, float factor, float low_freq_factor, float high_freq_factor,
                              float original_positions) {
  const float wavelength = static_cast<float>(2.0 * 3.141592653589793) / inv_freq;
  if (wavelength > original_positions / low_freq_factor) return inv_freq / factor;
  if (wavelength < original_positions / high_freq_factor) return inv_freq;
  const float smooth = (original_positions / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
  return (1.0f - smooth) * inv_freq / factor + smooth * inv_freq;
}

namespace {

// cos φ and sin φ, φ = position · inv_freq in float32 as torch forms it, each rounded once from double
void cos_sin_of(int64_t position, float inv_freq, float& c, float& s) {
  const float angle = static_cast<float>(position) * inv_freq;
  c = static_cast<float>(std::cos(static_cast<double>(angle)));
  s = static_cast<float>(std::sin(static_cast<double>(angle)));
}

}  // namespace

void rotary_cos_sin(const float* inv_freq, float* cos_sin, int64_t T, int64_t offset, int64_t rotary_dims) {
  const int64_t half = rotary_dims / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      float* pair = cos_sin + (t * half + i) * 2;
      cos_sin_of(offset + t, inv_freq[i], pair[0], pair[1]);
    }
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
        float c = 0, s = 0;
        cos_sin_of(offset + t, inv_freq[i], c, s);
        const int64_t first = pairs ? 2 * i : i, second = pairs ? 2 * i + 1 : i + half;
        const float a = row[first], b = row[second];
        out[first] = a * c - b * s;
        out[second] = a * s + b * c;
      }
    }
}

}  // namespace vkattn::reference
