#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// peak_flops — the device's multiply-add rate, for the roofline `vkattn bench` and bench_gemm
// print (VulkanBackend::measure_peak): each invocation runs 8 independent chains of vec4
// multiply-adds, acc = acc · multiplier + addend, `iterations` times (64 floating-point
// operations an iteration, nothing read, one float written), so that nothing but the arithmetic
// units bounds it. Each chain starts at its number times 1/1024, and y is the sum of the 32
// lanes at the end: VulkanBackend checks it against the closed form.
//   y (count)
#include "common.glsl"

layout(std430, binding = 0) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint count;        // invocations
  uint iterations;   // multiply-adds of each chain
  float multiplier;  // pushed, not constant, so that the compiler cannot fold the chains
  float addend;
} p;

void main() {
  uint i = flat_invocation_id();
  if (i >= p.count) return;
  vec4 acc[8];
  for (uint c = 0u; c < 8u; ++c) acc[c] = (vec4(4u * c) + vec4(0.0, 1.0, 2.0, 3.0)) / 1024.0;
  const vec4 m = vec4(p.multiplier), a = vec4(p.addend);
  for (uint n = 0u; n < p.iterations; ++n) {
    [[unroll]] for (uint c = 0u; c < 8u; ++c) acc[c] = fma(acc[c], m, a);
  }
  vec4 sum = vec4(0.0);
  for (uint c = 0u; c < 8u; ++c) sum += acc[c];
  y[i] = sum.x + sum.y + sum.z + sum.w;
}
