#pragma once
// The two helpers of Backend's checks that both its halves use (backend.cpp: the pass and what
// crosses to the host; backend_steps.cpp: the step methods).
#include <string>

#include "vkattn/backends/backend.h"
#include "vkattn/errors.h"

namespace vkattn::backend_checks {

// "query (2, 5, 60)"
inline std::string describe(const Value& v) { return v.name + " " + shape_string(v.shape); }

inline void require(bool ok, const std::string& step, const std::string& message) {
  if (!ok) throw ShapeError(step + ": " + message);
}

}  // namespace vkattn::backend_checks
