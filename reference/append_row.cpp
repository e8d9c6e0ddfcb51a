#include "reference/reference.h"

namespace vkattn::reference {

// (N, T, C) + row (C) -> (N, T+1, C); a null row appends zeros
void append_row(const float* x, const float* row, float* y, int64_t N, int64_t T, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) y[(n * (T + 1) + t) * C + c] = x[(n * T + t) * C + c];
    for (int64_t c = 0; c < C; ++c) y[(n * (T + 1) + T) * C + c] = row ? row[c] : 0.0f;
  }
}

}  // namespace vkattn::reference
