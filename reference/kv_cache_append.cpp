#include "reference/reference.h"

namespace vkattn::reference {

// cache[n, position + t, :] = rows[n, t, :]      cache (N, C, d), rows (N, T, d), position + T <= C
// rounded to the cache's format (0 float32: as they are)
void kv_cache_append(float* cache, const float* rows, int64_t N, int64_t C, int64_t T, int64_t d, int64_t position,
                     int format) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < d; ++c)
        cache[(n * C + position + t) * d + c] = round_to(rows[(n * T + t) * d + c], format);
}

}  // namespace vkattn::reference
