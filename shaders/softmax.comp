#version 450
#extension GL_GOOGLE_include_directive : require
// softmax — row-wise over the last axis, max-subtracted; a fully masked row gives zeros
//   x (R, S)  R = B·H·L rows of scores
//   y (R, S)  each row sums to 1, or is all 0 when every score is -inf
// One subgroup (or workgroup: row_reduce.glsl) per row: pass 1 reduces the max, pass 2 the sum
// of exp(x - max), pass 3 writes.
#include "common.glsl"
#include "row_reduce.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint rows;  // R
  uint cols;  // S
} p;

void main() {
  uint row = row_id();
  if (row >= p.rows) return;  // uniform per row: all its owners leave together
  uint lane = row_lane();
  uint start = row * p.cols;

  // pass 1: row max
  float row_max = NEG_INF;
  for (uint j = lane; j < p.cols; j += row_width()) row_max = max(row_max, x[start + j]);
  row_max = row_reduce(row_max, true);

  // a fully masked row: every score is -inf, exp(-inf - -inf) would be NaN; PyTorch's
  // safe softmax (and vkattn) gives zeros
  if (row_max == NEG_INF) {
    for (uint j = lane; j < p.cols; j += row_width()) y[start + j] = 0.0;
    return;
  }

  // pass 2: Σ exp(x - max)
  float sum = 0.0;
  for (uint j = lane; j < p.cols; j += row_width()) sum += exp(x[start + j] - row_max);
  sum = row_reduce(sum, false);

  // pass 3: normalise
  float inv_sum = 1.0 / sum;
  for (uint j = lane; j < p.cols; j += row_width()) y[start + j] = exp(x[start + j] - row_max) * inv_sum;
}
