// Element (i, f) of a (B·T, H·d) matrix with `width` = H·d columns, kept as (B, H, T, d)
// (i = b·T + t, f = h·d + c), lies at ((b·H + h)·T + t)·d + c = heads_row(i) + heads_col(f): a
// row's part and a column's, each computed once per row or column of a tile, not per element
// (a CPU device divides lane by lane). H and T are the including shader's push constants
// p.heads and p.tokens (gemm.glsl, gemv.glsl: split_heads and merge_heads folded into a product).
uint heads_row(uint i, uint width) { return (i / p.tokens * p.heads * p.tokens + i % p.tokens) * (width / p.heads); }
uint heads_col(uint f, uint width) {
  uint d = width / p.heads;
  uint h = f / d;
  return h * p.tokens * d + (f - h * d);
}
