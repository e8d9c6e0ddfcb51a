#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

// y[n, :] = x[n, :] / √(mean(x²) + eps) · weight      x, y (N, E)  weight (E)
// Llama's RMSNorm (torch.nn.RMSNorm): no mean subtracted, no bias. The sum of squares in double,
// as layer_norm's.
void rms_norm(const float* x, const float* weight, float* y, int64_t N, int64_t E, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* in = x + n * E;
    float* out = y + n * E;
    double squares = 0.0;
    for (int64_t e = 0; e < E; ++e) squares += static_cast<double>(in[e]) * in[e];
    const auto inv_rms = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(E) + eps));
    for (int64_t e = 0; e < E; ++e) out[e] = in[e] * inv_rms * weight[e];
  }
}

}  // namespace vkattn::reference
