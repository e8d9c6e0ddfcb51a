#version 450
#extension GL_GOOGLE_include_directive : require
// split_heads — give each head its own contiguous (T, d) block
//   x (B, T, n·E)   E = H·d; chunk c's head h owns features c·E + [h·d, (h+1)·d)  (n = 1: x is (B, T, E))
//   y (B, H, T, d)
#include "heads.glsl"

void main() {
  uint index = flat_invocation_id();  // unit index into y
  if (index >= unit_count()) return;
  uint dw = units_per_head();
  uint c = index % dw;
  uint t = (index / dw) % p.tokens;
  uint h = (index / (dw * p.tokens)) % p.heads;
  uint b = index / (dw * p.tokens * p.heads);
  copy_unit(index, (((b * p.tokens + t) * p.chunks + p.chunk) * p.heads + h) * dw + c);
}
