#include "reference/reference.h"

namespace vkattn::reference {

// y = x · other, element by element: SwiGLU's gate times up      x, other, y (n)
void multiply(const float* x, const float* other, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * other[i];
}

}  // namespace vkattn::reference
