#include <limits>

#include "reference/reference.h"

namespace vkattn::reference {

// y[n, :] = table[ids[n], :] · scale      ids (N) integer-valued floats, table (V, E), y (N, E)
// An id outside [0, V) (or not an integer) gives a row of NaN, never a read out of bounds.
void embedding(const float* ids, const float* table, float* y, int64_t N, int64_t V, int64_t E, float scale) {
  for (int64_t n = 0; n < N; ++n) {
    float id = ids[n];
    bool valid = id >= 0.0f && id < static_cast<float>(V) && id == static_cast<float>(static_cast<int64_t>(id));
    for (int64_t e = 0; e < E; ++e) {
      y[n * E + e] =
          valid ? table[static_cast<int64_t>(id) * E + e] * scale : std::numeric_limits<float>::quiet_NaN();
    }
  }
}

}  // namespace vkattn::reference
