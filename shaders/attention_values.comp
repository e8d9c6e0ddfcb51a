#version 450
#extension GL_GOOGLE_include_directive : require
// attention_values — out = P · V, batched over (B, H)
//   P   (B, H, L, S)  attention weights (softmax output): A of gemm.glsl, M = L, K = S
//   V   (B, H, S, d)  B stored (K, N): N = d, read along its rows
//   out (B, H, L, d)
#define B_IS_K_BY_N
#include "gemm.glsl"
