#version 450
#extension GL_GOOGLE_include_directive : require
// kv_cache_append — new keys (or values) written into a cache in place, at the cache's length:
//   rows  (N, T, d)    N = B·H: split_heads' output for the T newest positions
//   cache (N, C, d)    capacity C; rows position … position + T - 1 are written, the rest kept
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, binding = 1) writeonly buffer Cache { float cache[]; };

layout(push_constant) uniform Params {
  uint batch;     // N
  uint tokens;    // T
  uint capacity;  // C
  uint head_dim;  // d
  uint position;  // the first row written
} p;

void main() {
  uint index = flat_invocation_id();  // flat index into rows
  if (index >= p.batch * p.tokens * p.head_dim) return;
  uint c = index % p.head_dim;
  uint t = (index / p.head_dim) % p.tokens;
  uint n = index / (p.head_dim * p.tokens);
  cache[(n * p.capacity + p.position + t) * p.head_dim + c] = rows[index];
}
