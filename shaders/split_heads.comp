#version 450
#extension GL_GOOGLE_include_directive : require
// split_heads — give each head its own contiguous (T, d) block
//   x (B, T, E)     E = H·d, head h owns features [h·d, (h+1)·d)
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
  copy_unit(index, ((b * p.tokens + t) * p.heads + h) * dw + c);
}
