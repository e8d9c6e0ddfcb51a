#include "tests/support/tolerance.h"

#include <cmath>
#include <sstream>

namespace vkattn::testing {

static bool close(float a, float e, Tolerance tol) {
  if (std::isnan(a) || std::isnan(e)) return false;  // NaN matches nothing, not even NaN
  if (std::isinf(a) || std::isinf(e)) return a == e;
  return std::fabs(a - e) <= tol.atol + tol.rtol * std::fabs(e);
}

float max_abs_error(const Tensor& actual, const Tensor& expected) {
  float worst = 0.0f;
  for (size_t i = 0; i < actual.data.size() && i < expected.data.size(); ++i) {
    float a = actual.data[i], e = expected.data[i];
    if (std::isfinite(a) && std::isfinite(e)) worst = std::max(worst, std::fabs(a - e));
  }
  return worst;
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, Tolerance tol,
                                     std::vector<std::string> dims) {
  if (actual.shape != expected.shape) {
    return ::testing::AssertionFailure() << "shape " << shape_string(actual.shape) << " != expected "
                                         << shape_string(expected.shape);
  }
  if (actual.data.size() != expected.data.size()) {
    return ::testing::AssertionFailure() << "element count " << actual.data.size() << " != expected "
                                         << expected.data.size();
  }
  std::ostringstream first;
  int64_t mismatches = 0;
  for (size_t i = 0; i < actual.data.size(); ++i) {
    if (close(actual.data[i], expected.data[i], tol)) continue;
    if (mismatches++ < 5) {
      first << "\n  at " << index_string(actual.shape, static_cast<int64_t>(i), dims) << ": actual " << actual.data[i]
            << ", expected " << expected.data[i];
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatches << " of " << actual.data.size() << " elements of "
                                       << shape_string(actual.shape) << " differ beyond atol=" << tol.atol
                                       << " rtol=" << tol.rtol << " (max finite |error| "
                                       << max_abs_error(actual, expected) << "); first:" << first.str();
}

}  // namespace vkattn::testing
