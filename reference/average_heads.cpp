#include "reference/reference.h"

namespace vkattn::reference {

// avg[b, ij] = (1/H) Σ_h p[b, h, ij]     p (B, H, L·S)  avg (B, L·S)
void average_heads(const float* p, float* avg, int64_t B, int64_t H, int64_t plane) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ij = 0; ij < plane; ++ij) {
      float sum = 0.0f;
      for (int64_t h = 0; h < H; ++h) sum += p[(b * H + h) * plane + ij];
      avg[b * plane + ij] = sum / static_cast<float>(H);
    }
}

}  // namespace vkattn::reference
