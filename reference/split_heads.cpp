#include "reference/reference.h"

namespace vkattn::reference {

// (B, T, n·E) -> chunk `chunk`'s (B, H, T, d), E = H·d
void split_heads(const float* x, float* y, int64_t B, int64_t T, int64_t H, int64_t d, int64_t chunks, int64_t chunk) {
  const int64_t E = H * d;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < d; ++c)
          y[((b * H + h) * T + t) * d + c] = x[(b * T + t) * chunks * E + chunk * E + h * d + c];
}

}  // namespace vkattn::reference
