#include "reference/reference.h"

namespace vkattn::reference {

// y[b, t, :] = x[b, t, :] + table[t, :]      x, y (B, T, E), table (P, E) with P >= T
void positional_encoding(const float* x, const float* table, float* y, int64_t B, int64_t T, int64_t E) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) y[(b * T + t) * E + e] = x[(b * T + t) * E + e] + table[t * E + e];
}

}  // namespace vkattn::reference
