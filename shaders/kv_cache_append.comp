#version 450
#extension GL_GOOGLE_include_directive : require
// kv_cache_append — new keys (or values) written into a cache in place, at the cache's length:
//   rows  (N, T, d)    N = B·H: split_heads' output for the T newest positions
//   cache (N, C, d)    capacity C; rows position … position + T - 1 are written, the rest kept
// A cache kept 16-bit (FORMAT 1 float16, 2 bfloat16: KVCache's dtype) holds two elements a 32-bit
// word (sixteen_bit.glsl); each invocation then writes one word, its elements rounded, and keeps
// the half that lies outside the rows written (an odd d or position starts a row mid-word).
#include "common.glsl"
#include "sixteen_bit.glsl"

layout(constant_id = 1) const uint FORMAT = 0u;  // the cache's numbers: 0 float32, 1 float16, 2 bfloat16

layout(std430, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, binding = 1) buffer Cache { float cache[]; };
layout(std430, binding = 1) buffer Cache16 { uint cache16[]; };

layout(push_constant) uniform Params {
  uint batch;     // N
  uint tokens;    // T
  uint capacity;  // C
  uint head_dim;  // d
  uint position;  // the first row written
} p;

// The 16 bits cache element `e` (flat) takes: its new row's value rounded, or what it holds (also
// the unused half past the cache's last element, when it holds an odd count)
uint element_bits(uint e, uint word) {
  uint row = e / p.head_dim, t = row % p.capacity - p.position;  // wraps past T when before position
  if (t >= p.tokens || row >= p.batch * p.capacity) return (word >> (16u * (e % 2u))) & 0xffffu;
  uint n = row / p.capacity;
  return narrow_bits(rows[(n * p.tokens + t) * p.head_dim + e % p.head_dim], FORMAT);
}

void main() {
  uint index = flat_invocation_id();
  uint span = p.tokens * p.head_dim;  // elements written a row n: [first, first + span)
  if (FORMAT == 0u) {                 // index: flat into rows
    if (index >= p.batch * span) return;
    uint c = index % p.head_dim;
    uint t = (index / p.head_dim) % p.tokens;
    uint n = index / span;
    cache[(n * p.capacity + p.position + t) * p.head_dim + c] = rows[index];
    return;
  }
  // index: (n, j), the j-th word row n's elements touch; span / 2 + 1 words a row at most
  uint words = span / 2u + 1u, n = index / words, j = index % words;
  if (n >= p.batch) return;
  uint first = (n * p.capacity + p.position) * p.head_dim, word = first / 2u + j;
  if (2u * word >= first + span) return;  // past this row's last word
  // A whole cache written at once (T = C) puts row n - 1's last element in row n's first word
  // when it starts mid-word: that word is row n - 1's invocation's, which writes both halves.
  if (j == 0u && n > 0u && first % 2u == 1u && p.tokens == p.capacity) return;
  uint old = cache16[word];
  cache16[word] = element_bits(2u * word, old) | (element_bits(2u * word + 1u, old) << 16);
}
