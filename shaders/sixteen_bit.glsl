// Weights kept 16-bit (Backend::upload_matrix: a float16 or bfloat16 checkpoint's matrices, in
// half the memory): a storage buffer of uint words, element 2w in word w's low half and 2w + 1 in
// its high half. Read through these and widened to fp32 as they are read: the same numbers the
// widened copy held, bit for bit. `format`, a specialization constant of the including shader:
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
