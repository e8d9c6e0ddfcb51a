#include <algorithm>

#include "reference/reference.h"

namespace vkattn::reference {

// y[b, t, e] = x[b, T - n + t, e]: each sequence's last n positions      x (B, T, E), y (B, n, E)
void last_tokens(const float* x, float* y, int64_t B, int64_t T, int64_t n, int64_t E) {
  for (int64_t b = 0; b < B; ++b) {
    const float* last = x + (b * T + T - n) * E;  // row T - n of sequence b
    std::copy(last, last + n * E, y + b * n * E);
  }
}

}  // namespace vkattn::reference
