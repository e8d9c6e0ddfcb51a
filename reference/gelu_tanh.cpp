#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

// y = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 · x³))): GELU's tanh approximation, torch's
// gelu(approximate='tanh') and GPT-2's gelu_new.      x, y (n)
// Computed as x · sigmoid(2u) = x / (1 + e^(-2u)), the same value without 1 + tanh's cancellation
// in the negative tail.
void gelu_tanh(const float* x, float* y, int64_t n) {
  const float sqrt_2_over_pi = 0.79788456080286536f;
  for (int64_t i = 0; i < n; ++i) {
    const float u = sqrt_2_over_pi * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
    y[i] = x[i] / (1.0f + std::exp(-2.0f * u));
  }
}

}  // namespace vkattn::reference
