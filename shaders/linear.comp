#version 450
#extension GL_GOOGLE_include_directive : require
// linear — the q_proj, k_proj, v_proj and out_proj steps: y = x · Wᵀ + b
//   x (N, K)  every leading dim of the input flattened into N = B·T
//   W (M, K)  PyTorch's Linear.weight layout
//   b (M)     optional (specialization constant 1)
//   y (N, M)
#include "gemm.glsl"

layout(constant_id = 1) const bool HAS_BIAS = true;

layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint rows;    // N
  uint inner;   // K
  uint cols;    // M
} p;

void main() {
  uint index = flat_invocation_id();
  if (index >= p.rows * p.cols) return;
  uint n = index / p.cols;
  uint m = index % p.cols;
  float acc = strided_dot(n * p.inner, 1u, m * p.inner, 1u, p.inner);
  if (HAS_BIAS) acc += bias[m];
  y[index] = acc;
}
