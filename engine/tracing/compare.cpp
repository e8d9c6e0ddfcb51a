#include "vkattn/tracing/compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "vkattn/errors.h"

namespace vkattn {

ValueDiff compare_values(const Tensor& a, const Tensor& b, double atol, double rtol) {
  if (a.data.size() != b.data.size()) {
    throw ShapeError("cannot compare " + shape_string(a.shape) + " with " + shape_string(b.shape));
  }
  ValueDiff d;
  for (size_t k = 0; k < a.data.size(); ++k) {
    float x = a.data[k], y = b.data[k];
    bool same;
    if (std::isnan(x) || std::isnan(y)) {
      same = std::isnan(x) && std::isnan(y);
    } else if (std::isinf(x) || std::isinf(y)) {
      same = x == y;
    } else {
      double e = std::fabs(static_cast<double>(x) - y);
      d.max_abs_error = std::max(d.max_abs_error, e);
      same = e <= atol + rtol * std::fabs(static_cast<double>(y));
    }
    if (!same && d.mismatches++ == 0) {
      d.first_mismatch = k;
      d.a_value = x;
      d.b_value = y;
    }
  }
  return d;
}


std::string mismatch_report(const ValueDiff& d, const Shape& shape, const std::vector<std::string>& dims,
                            const std::string& a_label, const std::string& b_label, double atol, double rtol) {
  std::ostringstream s;
  s << d.mismatches << " of " << element_count(shape) << " elements beyond atol " << atol << " + rtol " << rtol
    << " * |" << b_label << "|\n  first at flat index " << d.first_mismatch << " = "
    << index_string(shape, static_cast<int64_t>(d.first_mismatch), dims) << ": " << std::setprecision(9) << a_label
    << " = " << d.a_value << ", " << b_label << " = " << d.b_value;
  return s.str();
}

}  // namespace vkattn
