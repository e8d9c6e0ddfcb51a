#version 450
#extension GL_GOOGLE_include_directive : require
// attention_combine — flash_decoding's parts merged into each query row's output
// (combine_parts.glsl):
//   partials (R, P, d + 2)  [output (d), m, l] per part      out (R, d)
// An invocation owns one output element and reads its row's P maxima and sums. flash_decoding's
// COMBINE build does the same at the end of its own dispatch, where it can (Backend::
// flash_decoding_combine).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) writeonly buffer Output { float out_rows[]; };
#include "combine_parts.glsl"

layout(push_constant) uniform Params {
  uint rows;      // R = B·H·L
  uint parts;     // P
  uint head_dim;  // d
} p;

void main() {
  uint index = flat_invocation_id();  // r · d + c
  if (index >= p.rows * p.head_dim) return;
  out_rows[index] = combined_part(index / p.head_dim, p.parts, p.head_dim, index % p.head_dim);
}
