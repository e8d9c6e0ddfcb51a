#include "reference/reference.h"

namespace vkattn::reference {

// y = x · Wᵀ + b
//   x (N, K)  W (M, K)  b (M) or null  y (N, M)
void linear(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t K, int64_t M) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      double acc = 0.0;  // fp32 products summed in double: the ground truth for every summation order
      for (int64_t k = 0; k < K; ++k) acc += x[n * K + k] * w[m * K + k];
      y[n * M + m] = static_cast<float>(b ? acc + b[m] : acc);
    }
  }
}

}  // namespace vkattn::reference
