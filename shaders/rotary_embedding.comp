#version 450
#extension GL_GOOGLE_include_directive : require
// rotary_embedding — RoPE: each row of x (N, T, d), N = B·H, at position offset + t, its first r
// features rotated pair by pair; pair i by the angle φ = position · inv_freq[i] (float32, the
// product torch forms):
//   (a, b) -> (a·cos φ − b·sin φ, a·sin φ + b·cos φ)
//   halves (GPT-NeoX, rotate_half): a = x[i], b = x[i + r/2];  pairs (GPT-J): a = x[2i], b = x[2i + 1]
// Features r … d−1 are copied. One invocation per output element. φ reaches thousands of radians
// at long positions: it is reduced by 2π in two parts (Cody–Waite) before cos and sin, whose
// accuracy drivers guarantee only near 0.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer Frequencies { float inv_freq[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint count;        // N·T·d
  uint tokens;       // T
  uint dim;          // d
  uint offset;       // the position of row 0
  uint rotary_dims;  // r
  uint pairs;        // 1: pairs, 0: halves
} p;

// φ − 2πk, |result| <= π: 2π split as 6.28125 (exact in 9 bits, so k·6.28125 is exact for k < 2^15)
// plus the rest
float reduce(float angle) {
  float k = floor(angle * 0.15915494309189535 + 0.5);
  return (angle - k * 6.28125) - k * 1.9353071795864769e-3;
}

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
  precise float angle = float(p.offset + (e / p.dim) % p.tokens) * inv_freq[i];
  float reduced = reduce(angle);
  float c = cos(reduced), s = sin(reduced);
  float a = x[row + a_at], b = x[row + b_at];
  y[e] = first ? a * c - b * s : a * s + b * c;
}
