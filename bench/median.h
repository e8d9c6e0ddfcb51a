#pragma once
// The benchmark programs' summary of repeated timings: the middle one, robust to a busy machine's
// outliers. `v` is not empty.
#include <algorithm>
#include <vector>

namespace vkattn::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace vkattn::bench
