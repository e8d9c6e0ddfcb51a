#version 450
#extension GL_GOOGLE_include_directive : require
// rotary_embedding — RoPE: each row of x (N, T, d), N = B·H, at position offset + t, its first r
// features rotated pair by pair; pair i by the angle φ = position · inv_freq[i]:
//   (a, b) -> (a·cos φ − b·sin φ, a·sin φ + b·cos φ)
//   halves (GPT-NeoX, rotate_half): a = x[i], b = x[i + r/2];  pairs (GPT-J): a = x[2i], b = x[2i + 1]
// Features r … d−1 are copied. One invocation per output element. cos φ and sin φ come from a
// table made on the host (reference::rotary_cos_sin), as most implementations keep one: GLSL's
// cos and sin are approximate (Vulkan bounds their error to 2^-11 within [-π, π], and
// SwiftShader's reach it), and φ reaches thousands of radians.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer CosSin { float cos_sin[]; };  // (T, r/2, 2)
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint count;        // N·T·d
  uint tokens;       // T
  uint dim;          // d
  uint rotary_dims;  // r
  uint pairs;        // 1: pairs, 0: halves
} p;

void main() {
  uint e = flat_invocation_id();
  if (e >= p.count) return;
  uint f = e % p.dim, row = e - f;
  if (f >= p.rotary_dims) {
    y[e] = x[e];
    return;
  }
  uint half_r = p.rotary_dims / 2u;
  uint i = p.pairs == 1u ? f / 2u : f % half_r;
  bool first = p.pairs == 1u ? (f % 2u) == 0u : f < half_r;
  uint a_at = p.pairs == 1u ? 2u * i : i, b_at = p.pairs == 1u ? 2u * i + 1u : i + half_r;
  uint at = 2u * (((e / p.dim) % p.tokens) * half_r + i);
  float c = cos_sin[at], s = cos_sin[at + 1u];
  float a = x[row + a_at], b = x[row + b_at];
  y[e] = first ? a * c - b * s : a * s + b * c;
}
