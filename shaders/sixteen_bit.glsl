// Tensors kept 16-bit (Backend::upload_matrix: a float16 or bfloat16 checkpoint's matrices, in
// half the memory; a KVCache of dtype float16 or bfloat16): a storage buffer of uint words,
// element 2w in word w's low half and 2w + 1 in its high half. Read through these and widened to
// fp32 as they are read: the same numbers the widened copy held, bit for bit; a cache's values
// are rounded to them as they are written (narrow_bits). `format`, a specialization constant of the including shader:
// 0 float32 (not read here), 1 float16, 2 bfloat16 (the top half of a float32).
// Plain uint words, not float16_t: no 16-bit storage feature is needed (SwiftShader has none).

// Element `which` (0 or 1) of `word`
float widen(uint word, uint which, uint format) {
  uint bits = (word >> (16u * which)) & 0xffffu;
  return format == 1u ? unpackHalf2x16(bits).x : uintBitsToFloat(bits << 16);
}

// Both elements of `word`, in order
vec2 widen_pair(uint word, uint format) {
  return format == 1u ? unpackHalf2x16(word) : vec2(uintBitsToFloat(word << 16), uintBitsToFloat(word & 0xffff0000u));
}

// The 16 bits of the `format` number nearest `value`, ties to even, NaN kept a NaN: integer steps,
// not packHalf2x16 (whose rounding Vulkan leaves to the device), so that every device stores the
// bits the CPU reference's narrow_bits computes (reference/sixteen_bit.cpp, step for step).
uint narrow_bits(float value, uint format) {
  uint x = floatBitsToUint(value);
  if (format == 2u) return isnan(value) ? (x >> 16) | 0x40u : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to infinity
  if (a >= 0x38800000u) {                       // 2^-14 and up: a normal float16
    uint r = a - 0x38000000u;                   // the exponent's bias 127 -> 15
    return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  uint shift = 126u - (a >> 23);  // below 2^-14: a multiple of float16's 2^-24, or zero
  if (shift > 24u) return sign;
  uint m = (a & 0x7fffffu) | 0x800000u, q = m >> shift, rest = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
  return sign | (q + ((rest > half_ || (rest == half_ && (q & 1u) != 0u)) ? 1u : 0u));
}
