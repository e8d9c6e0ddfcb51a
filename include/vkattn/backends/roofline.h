#pragma once
// Each step against the device's roofline: the time its work needs at the device's peak —
// its floating-point operations at the peak rate, or its bytes at the peak bandwidth, whichever
// takes longer — over the time it took. A matrix product far below 100 % leaves the arithmetic
// units idle; a softmax far below it, the memory. `vkattn bench` prints it beside each step's
// time, and bench_gemm the fastest GEMM plan's share of the peak rate (docs/performance.md).
//
// What a step must do at the least, from its shapes (StepEvent): the multiply-adds of the matrix
// products, twice — linear 2·M·N·K, attention_scores 2·(B·H·L·S)·d, attention_values
// 2·(B·H·L·d)·S, flash_attention both, 4·(B·H·L·d)·S, the half a causal mask skips counted too —
// and every step's inputs read once and its output written once, four bytes a number (a 16-bit
// weight is counted as 32-bit). The other steps' arithmetic (softmax's exponentials, a norm's
// sums) is not counted: they are measured by their bytes.
#include <string>

#include "vkattn/tracing/tracer.h"

namespace vkattn {

// What a device can do at best: floating-point operations a second (a multiply-add is two) and
// bytes a second between its memory and its shaders (VulkanBackend::measure_peak).
struct DevicePeak {
  double flops = 0;  // per second
  double bytes = 0;  // per second
  std::string how;   // how they were measured, in words
};

struct StepCost {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes read and written
};

// The least a step must do (above); zero for a layout step folded into its neighbour.
StepCost step_cost(const StepEvent& step);

// The time `cost` needs at `peak`, in seconds: the longer of its operations at the peak rate
// and its bytes at the peak bandwidth.
double roofline_seconds(const StepCost& cost, const DevicePeak& peak);

}  // namespace vkattn
