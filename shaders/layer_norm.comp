#version 450
#extension GL_GOOGLE_include_directive : require
// layer_norm — the norm1, norm2 and final norm steps: torch.nn.LayerNorm over the last axis
//   x (N, E)       every leading dim flattened into N = B·T rows
//   weight (E), bias (E)
//   y (N, E)       (x - mean) / √(var + eps) · weight + bias, var the biased variance (÷ E)
// One subgroup (or workgroup: row_reduce.glsl) per row: pass 1 reduces Σ (x - x₀) for the mean,
// pass 2 Σ (x - mean)² (two passes, no cancellation), pass 3 writes. Pass 1 sums each value less
// the row's first, x₀: on a row of mean 100 the fp32 sum of x itself loses digits that depend on
// the order of the sum (so on the lane count), the sum of x - x₀ keeps them.
#include "common.glsl"
#include "row_reduce.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer Weight { float weight[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) writeonly buffer Output { float y[]; };

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

  // pass 1: the mean, shifted by the row's first value
  float shift = x[start];
  float sum = 0.0;
  for (uint e = lane; e < p.cols; e += row_width()) sum += x[start + e] - shift;
  float mean = shift + row_reduce(sum, false) / float(p.cols);

  // pass 2: the biased variance
  float squares = 0.0;
  for (uint e = lane; e < p.cols; e += row_width()) {
    float centred = x[start + e] - mean;
    squares += centred * centred;
  }
  float inv_std = inversesqrt(row_reduce(squares, false) / float(p.cols) + p.eps);

  // pass 3: normalise, scale, shift
  for (uint e = lane; e < p.cols; e += row_width()) {
    y[start + e] = (x[start + e] - mean) * inv_std * weight[e] + bias[e];
  }
}
