#include "reference/reference.h"

namespace vkattn::reference {

// out[n, i, c] = Σ_j P[n, i, j] · V[n / group, j, c]
//   P (B·H, L, S)  V (B·H/group, S, d)  out (B·H, L, d)
void attention_values(const float* p, const float* v, float* out, int64_t BH, int64_t L, int64_t S,
                      int64_t d, int64_t group) {
  for (int64_t n = 0; n < BH; ++n)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0.0;  // summed in double, as linear
        for (int64_t j = 0; j < S; ++j) acc += p[(n * L + i) * S + j] * v[(n / group * S + j) * d + c];
        out[(n * L + i) * d + c] = static_cast<float>(acc);
      }
}

}  // namespace vkattn::reference
