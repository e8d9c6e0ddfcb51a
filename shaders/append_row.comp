#version 450
#extension GL_GOOGLE_include_directive : require
// append_row — the add_bias_kv and add_zero_attn steps: one more key/value position
//   x   (N, T, C)    N = B for add_bias_kv on (B, S, E); N = B·H for add_zero_attn on (B, H, S, d)
//   row (C)          bias_k or bias_v; zeros when HAS_ROW is false (add_zero_attn)
//   y   (N, T+1, C)
#include "common.glsl"

layout(constant_id = 1) const bool HAS_ROW = true;

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 1) readonly buffer Row { float row[]; };
layout(std430, binding = 2) writeonly buffer Output { float y[]; };

layout(push_constant) uniform Params {
  uint batch;     // N
  uint tokens;    // T (of the input)
  uint channels;  // C
} p;

void main() {
  uint index = flat_invocation_id();  // flat index into y
  uint out_tokens = p.tokens + 1u;
  if (index >= p.batch * out_tokens * p.channels) return;
  uint c = index % p.channels;
  uint t = (index / p.channels) % out_tokens;
  uint n = index / (p.channels * out_tokens);
  if (t < p.tokens) {
    y[index] = x[(n * p.tokens + t) * p.channels + c];
  } else {
    y[index] = HAS_ROW ? row[c] : 0.0;
  }
}
