#include "vkattn/backends/roofline.h"

#include <algorithm>

namespace vkattn {
namespace {

double elements(const Shape& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

}  // namespace

StepCost step_cost(const StepEvent& step) {
  if (!step.folded.empty()) return {};
  StepCost cost;
  for (const TensorInfo& input : step.inputs) cost.bytes += 4 * elements(input.shape);
  const double out = elements(step.output.shape);
  cost.bytes += 4 * out;
  // the products' inner dims: K, d, S or twice S (QKᵀ and P·V), as their inputs give them
  auto last = [&](size_t input) { return static_cast<double>(step.inputs.at(input).shape.back()); };
  auto rows = [&](size_t input) {
    const Shape& s = step.inputs.at(input).shape;
    return static_cast<double>(s.at(s.size() - 2));
  };
  if (step.op == "linear" || step.op == "attention_scores" || step.op == "attention_values") {
    cost.flops = 2 * out * last(0);  // linear: x (…, K); scores: q (…, d); values: p (…, S)
  } else if (step.op == "flash_attention") {
    cost.flops = 4 * out * rows(1);  // k (B, H_kv, S, d)
  }
  return cost;
}

double roofline_seconds(const StepCost& cost, const DevicePeak& peak) {
  const double compute = peak.flops > 0 ? cost.flops / peak.flops : 0;
  const double memory = peak.bytes > 0 ? cost.bytes / peak.bytes : 0;
  return std::max(compute, memory);
}

}  // namespace vkattn
