#include "reference/reference.h"

namespace vkattn::reference {

// y = max(x, 0)      x, y (n)
void relu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

}  // namespace vkattn::reference
