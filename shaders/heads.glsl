// split_heads and merge_heads: the same copy between (B, T, H, d) and (B, H, T, d), each
// invocation moving WIDTH floats — one vec4 where d is a multiple of 4 (the host's choice), else
// one float. Indices below count those units: d/WIDTH of them per head and token. (The
// divisions that unravel an index are no vector instruction on a CPU device: a quarter as many
// of them is most of what a vec4 copy saves there.)
#include "common.glsl"

layout(constant_id = 1) const uint WIDTH = 1;  // floats per invocation: 1 or 4

layout(std430, binding = 0) readonly buffer Input { float x[]; };
layout(std430, binding = 0) readonly buffer Input4 { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Output { float y[]; };
layout(std430, binding = 1) writeonly buffer Output4 { vec4 y4[]; };

layout(push_constant) uniform Params {
  uint batch;     // B
  uint heads;     // H
  uint tokens;    // T
  uint head_dim;  // d
  uint chunks;    // split_heads: x's rows hold `chunks` tensors of H·d features side by side
  uint chunk;     //   (3: the packed in_proj's q, k, v) and `chunk` is split out; merge_heads: 1, 0
} p;

uint units_per_head() { return p.head_dim / WIDTH; }
uint unit_count() { return p.batch * p.heads * p.tokens * units_per_head(); }

// y's unit `to` = x's unit `from`
void copy_unit(uint to, uint from) {
  if (WIDTH == 4u) {
    y4[to] = x4[from];
  } else {
    y[to] = x[from];
  }
}
