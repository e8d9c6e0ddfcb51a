#version 450
#extension GL_GOOGLE_include_directive : require
// linear — the q_proj, k_proj, v_proj and out_proj steps: y = x · Wᵀ + b
//   x (N, K)  every leading dim of the input flattened into N = B·T
//   W (M, K)  PyTorch's Linear.weight layout: B of gemm.glsl stored (N, K)
//   b (M)     optional (HAS_BIAS)
//   r (N, M)  optional (RESIDUAL): the residual_add after it, folded into the store
//   y (N, M)  batch 1, scale 1
// GEMV defined (the linear_gemv build): a product of a few rows (gemv.glsl); else gemm.glsl.
#define RESIDUAL_BINDING
#ifdef GEMV
#include "gemv.glsl"
#else
#include "gemm.glsl"
#endif
