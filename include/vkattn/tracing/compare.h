#pragma once
// Element-wise comparison of two tensors of one shape, as `vkattn diff`, `vkattn run
// --side-by-side` and the tutorials judge agreement: |a - b| <= atol + rtol·|b|, NaN against
// anything but NaN is a mismatch, and an infinity must equal its partner (a blocked score is
// -inf on both sides).
#include <cstddef>
#include <string>
#include <vector>

#include "vkattn/tensor.h"

namespace vkattn {

struct ValueDiff {
  size_t mismatches = 0;           // elements beyond atol + rtol·|b|, NaN against a number included
  double max_abs_error = 0;        // over the elements finite on both sides
  size_t first_mismatch = 0;       // flat index, when mismatches > 0
  float a_value = 0, b_value = 0;  // the values there
};

// `a` and `b` must hold the same number of elements (ShapeError otherwise).
ValueDiff compare_values(const Tensor& a, const Tensor& b, double atol, double rtol);

// Two lines, where `d` found its first mismatch, its index decoded into `dims` (the step's axis
// names):  3 of 400 elements beyond atol 1e-05 + rtol 1e-05 * |cpu|
//            first at flat index 17 = (b=0, h=1, i=0, j=2): gpu = 0.25, cpu = 0.5
std::string mismatch_report(const ValueDiff& d, const Shape& shape, const std::vector<std::string>& dims,
                            const std::string& a_label, const std::string& b_label, double atol, double rtol);

}  // namespace vkattn
