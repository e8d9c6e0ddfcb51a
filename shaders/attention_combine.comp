#version 450
#extension GL_GOOGLE_include_directive : require
// attention_combine — flash_decoding's parts merged into each query row's output:
//   partials (R, P, d + 2)  [output (d), m, l] per part      out (R, d)
//   M = the largest m of a part that saw a key (l > 0)
//   out = Σ_p output_p · exp(m_p - M) / Σ_p l_p · exp(m_p - M); zeros where no part saw a key
// An invocation owns one output element and reads its row's P maxima and sums.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) writeonly buffer Output { float out_rows[]; };

layout(push_constant) uniform Params {
  uint rows;      // R = B·H·L
  uint parts;     // P
  uint head_dim;  // d
} p;

void main() {
  uint index = flat_invocation_id();  // r · d + c
  if (index >= p.rows * p.head_dim) return;
  uint c = index % p.head_dim;
  uint r = index / p.head_dim;
  uint stride = p.head_dim + 2u;
  uint row = r * p.parts * stride;
  float m = -1e30;
  for (uint part = 0u; part < p.parts; ++part) {
    if (partials[row + part * stride + p.head_dim + 1u] > 0.0) m = max(m, partials[row + part * stride + p.head_dim]);
  }
  float l = 0.0, acc = 0.0;
  for (uint part = 0u; part < p.parts; ++part) {
    float w = exp(partials[row + part * stride + p.head_dim] - m);
    l += partials[row + part * stride + p.head_dim + 1u] * w;
    acc += partials[row + part * stride + c] * w;
  }
  out_rows[index] = l > 0.0 ? acc / l : 0.0;
}
