#include "reference/reference.h"

namespace vkattn::reference {

// y = x + residual      x, residual, y (n)
void residual_add(const float* x, const float* residual, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] + residual[i];
}

}  // namespace vkattn::reference
