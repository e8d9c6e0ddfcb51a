#pragma once
// The one tolerance helper for every numeric test: |actual - expected| <= atol + rtol·|expected|
// element-wise. On failure it reports how many elements mismatch, the worst error, and the first
// few mismatches with their index decoded into the tensor's named dims, e.g. (b=1, h=0, i=3, j=2).
// A NaN or Inf on one side where the other has a finite number (or a different Inf) is a
// mismatch: a kernel that produces NaN never passes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "vkattn/tensor.h"

namespace vkattn::testing {

struct Tolerance {
  float atol = 1e-5f;
  float rtol = 1e-5f;
};

// `dims` names the axes ("b", "h", "i", "j"); by default d0, d1, ….
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, Tolerance tol = {},
                                     std::vector<std::string> dims = {});

// The largest |actual - expected| over elements where both are finite (for reports).
float max_abs_error(const Tensor& actual, const Tensor& expected);

}  // namespace vkattn::testing
