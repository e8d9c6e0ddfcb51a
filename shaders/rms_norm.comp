#version 450
#extension GL_GOOGLE_include_directive : require
// rms_norm — Llama's input_layernorm, post_attention_layernorm and final norm (torch.nn.RMSNorm)
//   x (N, E)       every leading dim flattened into N = B·T rows
//   weight (E)
//   y (N, E)       x / √(mean(x²) + eps) · weight: no mean subtracted, no bias
// One subgroup (or workgroup: row_reduce.glsl) per row, as layer_norm: pass 1 reduces Σ x²,
// pass 2 writes.
#include "common.glsl"
#include "row_reduce.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer Weight { float weight[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint rows;  // N
  uint cols;  // E
  float eps;
} p;

void main() {
  uint row = row_id();
  if (row >= p.rows) return;  // uniform per row: all its owners leave together
  uint lane = row_lane();
  uint start = row * p.cols;

  float squares = 0.0;
  for (uint e = lane; e < p.cols; e += row_width()) squares += x[start + e] * x[start + e];
  float inv_rms = inversesqrt(row_reduce(squares, false) / float(p.cols) + p.eps);

  for (uint e = lane; e < p.cols; e += row_width()) y[start + e] = x[start + e] * inv_rms * weight[e];
}
