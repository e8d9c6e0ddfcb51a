#include "reference/reference.h"

namespace vkattn::reference {

// y[b, e] = Σ_t x[b, t, e] / T      x (B, T, E), y (B, E)
void mean_pool(const float* x, float* y, int64_t B, int64_t T, int64_t E) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t e = 0; e < E; ++e) {
      float sum = 0.0f;
      for (int64_t t = 0; t < T; ++t) sum += x[(b * T + t) * E + e];
      y[b * E + e] = sum / static_cast<float>(T);
    }
  }
}

}  // namespace vkattn::reference
