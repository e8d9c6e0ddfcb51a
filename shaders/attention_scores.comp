#version 450
#extension GL_GOOGLE_include_directive : require
// attention_scores — scores = Q · Kᵀ · scale, batched over (B, H)
//   Q      (B, H, L, d)
//   K      (B, H, S, d)
//   scores (B, H, L, S)   scale = 1/√d
#include "gemm.glsl"

layout(std430, binding = 2) writeonly buffer Output { float scores[]; };

layout(push_constant) uniform Params {
  uint batch;   // B·H
  uint rows;    // L
  uint cols;    // S
  uint inner;   // d
  float scale;  // 1/√d
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.batch * p.rows * p.cols) return;
  uint n = index / (p.rows * p.cols);
  uint i = (index / p.cols) % p.rows;
  uint j = index % p.cols;
  uint q_row = (n * p.rows + i) * p.inner;  // Q[n, i, :]
  uint k_row = (n * p.cols + j) * p.inner;  // K[n, j, :]
  scores[index] = strided_dot(q_row, 1u, k_row, 1u, p.inner) * p.scale;
}
