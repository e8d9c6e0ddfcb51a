#version 450
#extension GL_GOOGLE_include_directive : require
// attention_values — out = P · V, batched over (B, H)
//   P   (B, H, L, S)  attention weights (softmax output)
//   V   (B, H, S, d)
//   out (B, H, L, d)
#include "gemm.glsl"

layout(std430, binding = 2) writeonly buffer Output { float values[]; };

layout(push_constant) uniform Params {
  uint batch;   // B·H
  uint rows;    // L
  uint cols;    // d
  uint inner;   // S
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.batch * p.rows * p.cols) return;
  uint n = index / (p.rows * p.cols);
  uint i = (index / p.cols) % p.rows;
  uint c = index % p.cols;
  uint p_row = (n * p.rows + i) * p.inner;   // P[n, i, :]
  uint v_col = n * p.inner * p.cols + c;     // V[n, :, c], stepping d floats per key
  values[index] = strided_dot(p_row, 1u, v_col, p.cols, p.inner);
}
