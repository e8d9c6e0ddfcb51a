#include "reference/reference.h"

namespace vkattn::reference {

// y[b, e] = x[b, 0, e]: each sequence's first position (BERT's [CLS])      x (B, T, E), y (B, E)
void first_token(const float* x, float* y, int64_t B, int64_t T, int64_t E) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t e = 0; e < E; ++e) y[b * E + e] = x[b * T * E + e];
  }
}

}  // namespace vkattn::reference
