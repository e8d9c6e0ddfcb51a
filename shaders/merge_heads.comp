#version 450
#extension GL_GOOGLE_include_directive : require
// merge_heads — concatenate the heads back into one feature axis (inverse of split_heads)
//   x (B, H, T, d)
//   y (B, T, E)     E = H·d
#include "heads.glsl"

void main() {
  uint index = flat_invocation_id();  // unit index into y
  if (index >= unit_count()) return;
  uint dw = units_per_head();
  uint c = index % dw;
  uint h = (index / dw) % p.heads;
  uint t = (index / (dw * p.heads)) % p.tokens;
  uint b = index / (dw * p.heads * p.tokens);
  copy_unit(index, ((b * p.heads + h) * p.tokens + t) * dw + c);
}
