#version 450
#extension GL_GOOGLE_include_directive : require
// peak_bytes — the device's memory bandwidth, for the roofline `vkattn bench` and bench_gemm
// print (VulkanBackend::measure_peak): a copy, y = x, `per` vec4s an invocation, the grid's
// invocations side by side at each of them (invocation i copies i, i + count, i + 2·count, …),
// so that neighbouring invocations touch neighbouring memory as on any device.
//   x (count · per) vec4, y (count · per) vec4
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { vec4 x[]; };
layout(std430, binding = 1) writeonly buffer Output { vec4 y[]; };

layout(push_constant) uniform Params {
  uint count;  // invocations
  uint per;    // vec4s each copies
} p;

void main() {
  uint i = flat_invocation_id();
  if (i >= p.count) return;
  for (uint k = 0u; k < p.per; ++k) y[i + k * p.count] = x[i + k * p.count];
}
