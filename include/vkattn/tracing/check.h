#pragma once
// Checking the user's own attention: the intermediate tensors of their code (PyTorch's, usually),
// recorded under vkattn's step names, against the same steps of vkattn's recipe run on the same
// weights and inputs. Every recorded step is compared in the recipe's order; the first that
// differs is named with its decoded index and both values, and with a diagnosis where the
// difference looks like one of the classic mistakes:
//   axes in another order      yours (2, 10, 8, 64) is (b, t, h, c), vkattn's (b, h, t, c):
//                              a missing .transpose(1, 2)? (also heads merged in the wrong order,
//                              and K·Qᵀ for Q·Kᵀ)
//   a constant factor          scores scaled by 1/d instead of 1/√d, or not scaled at all
//   softmax over another axis  yours sums to 1 along i (dim=2), vkattn's along j (dim=-1)
//   a mask of the wrong polarity  yours blocks the positions vkattn keeps, and keeps the blocked
// and, in a grouped-query attention (check_grouped_query):
//   RoPE's other convention    yours rotates neighbouring pairs where the recipe rotates halves, or
//                              the other way round
//   another θ                  yours turns pair 1 by another angle a position: θ ≈ 500000, not 10000
//   K/V heads repeated with .repeat   query head h met key/value head h mod H_kv, not h / (H/H_kv)
// Yours may be shaped with vkattn's axes merged ((B·H, L, d) for (B, H, L, d)) or without a batch
// axis of 1. A blocked score filled with -1e9 (or less) counts as vkattn's -inf.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vkattn/backends/backend.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tensor.h"
#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {

// The recipe's RoPE, for telling another convention or θ from other differences.
struct RotaryCheck {
  float theta = 10000.0f;
  RotaryConvention convention = RotaryConvention::half;
  int64_t rotary_dims = 0;  // 0: d
  int64_t offset = 0;       // the first row's position
};

struct CheckOptions {
  double atol = 1e-4, rtol = 1e-4;  // |yours - vkattn's| <= atol + rtol·|vkattn's|
  // The recipe's head count: a feature axis f of E = H·c is seen as (h, c) when looking for axes
  // in another order (merge_heads without its transpose). 0 leaves f whole.
  int64_t heads = 0;
  int64_t kv_group = 1;               // query heads per key/value head (grouped-query attention)
  std::optional<RotaryCheck> rotary;  // the recipe's rotary_embedding steps' parameters
};

enum class StepVerdict { not_recorded, agrees, differs };

struct StepCheck {
  int index = 0;                  // the step's position in vkattn's recipe
  std::string name, op;           // vkattn's step
  Shape shape;                    // vkattn's tensor
  std::vector<std::string> dims;  // its axis names
  std::optional<Shape> yours;     // the recorded tensor's shape, when the step was recorded
  StepVerdict verdict = StepVerdict::not_recorded;
  std::optional<ValueDiff> diff;  // yours against vkattn's, when they hold as many elements
  bool infinite_error = false;    // an element infinite or NaN on one side only (a mask's difference)
  std::string where;              // the first element beyond tolerance, decoded: "(b=0, h=1, i=2, j=0)"
  std::string diagnosis;          // what the difference is, in words; a note where both agree
};

struct CheckReport {
  std::string backend, device;  // where vkattn's recipe ran
  double atol = 0, rtol = 0;
  std::vector<StepCheck> steps;                          // vkattn's recipe, in order
  std::vector<std::pair<std::string, std::string>> unknown;  // (recorded name, a likely step or "")
  std::optional<size_t> first_divergent;                 // into steps

  // At least one step recorded, every recorded step agrees, and every recorded name is a step.
  bool ok() const;
  // The report as the command line prints it: a table of the recipe's steps, then the first
  // divergent step and its diagnosis (lines within 100 columns).
  std::string text() const;
};

// `recorded`: (step name, tensor) in any order; `recipe`: vkattn's pass, recorded with values.
// ShapeError when `recipe` holds no values.
CheckReport check_steps(const std::vector<std::pair<std::string, Tensor>>& recorded, const StepRecorder& recipe,
                        const CheckOptions& options = {});

// `vkattn check` and Python's vkattn.check: `module`'s recipe run on `backend` with the inputs
// and masks of `forward` (need_weights is forced on, and the unfused path unless the user
// recorded a flash_attention step), then check_steps against it with the module's head count.
CheckReport check_attention(const std::vector<std::pair<std::string, Tensor>>& recorded,
                            const MultiHeadAttention& module, Backend& backend, const Tensor& query,
                            const Tensor& key, const Tensor& value, ForwardOptions forward,
                            CheckOptions options = {});
// The same for a grouped-query attention (Llama's) on x: its recipe with weights (unfused) unless
// flash_attention was recorded, checked with its heads, key/value group and RoPE.
CheckReport check_grouped_query(const std::vector<std::pair<std::string, Tensor>>& recorded,
                                const GroupedQueryAttention& module, Backend& backend, const Tensor& x,
                                GroupedQueryOptions forward, CheckOptions options = {});

}  // namespace vkattn
