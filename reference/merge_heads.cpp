#include "reference/reference.h"

namespace vkattn::reference {

// (B, H, T, d) -> (B, T, E), E = H·d: the heads concatenated along the feature axis
void merge_heads(const float* x, float* y, int64_t B, int64_t H, int64_t T, int64_t d) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t c = 0; c < d; ++c)
          y[(b * T + t) * H * d + h * d + c] = x[((b * H + h) * T + t) * d + c];
}

}  // namespace vkattn::reference
