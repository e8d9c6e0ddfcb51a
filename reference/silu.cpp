#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

// y = x · sigmoid(x) = x / (1 + e^(-x)): torch's silu, Llama's act_fn      x, y (n)
void silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

}  // namespace vkattn::reference
