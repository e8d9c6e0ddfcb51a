#include "engine/tracing/numbers.h"

#include <cmath>
#include <cstdio>

namespace vkattn {

std::string number_text(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char text[40];
  std::snprintf(text, sizeof text, "%.*g", digits, v);
  return text;
}

}  // namespace vkattn
