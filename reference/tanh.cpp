#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

// y = tanh(x): torch's tanh, BERT's pooler activation      x, y (n)
void tanh(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace vkattn::reference
