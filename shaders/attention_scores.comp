#version 450
#extension GL_GOOGLE_include_directive : require
// attention_scores — scores = Q · Kᵀ · scale, batched over (B, H)
//   Q      (B, H, L, d)   A of gemm.glsl: batch B·H, M = L, K = d
//   K      (B, H, S, d)   B stored (N, K): N = S
//   scores (B, H, L, S)   scale = 1/√d
#include "gemm.glsl"
