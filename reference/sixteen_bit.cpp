#include <bit>
#include <cmath>

#include "reference/reference.h"

namespace vkattn::reference {

// Rounded as shaders/sixteen_bit.glsl's narrow_bits rounds, integer step for integer step, so that
// a 16-bit cache holds the same bits on every device and here.
uint32_t narrow_bits(float value, int format) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if (format == 2) {  // bfloat16: float32's top half, to nearest even; NaN stays a (quiet) NaN
    if (std::isnan(value)) return (x >> 16) | 0x40u;
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  }
  const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to infinity
  if (a >= 0x38800000u) {                       // 2^-14 and up: a normal float16
    const uint32_t r = a - 0x38000000u;         // the exponent's bias 127 -> 15
    return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  const uint32_t shift = 126u - (a >> 23);  // below 2^-14: a multiple of float16's 2^-24, or zero
  if (shift > 24u) return sign;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u, q = m >> shift, rest = m & ((1u << shift) - 1u),
                 half = 1u << (shift - 1u);
  return sign | (q + ((rest > half || (rest == half && (q & 1u))) ? 1u : 0u));
}

float widen_bits(uint32_t bits, int format) {
  if (format == 2) return std::bit_cast<float>(bits << 16);
  const uint32_t sign = (bits & 0x8000u) << 16, exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0u) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float subnormal = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -subnormal : subnormal;
}

float round_to(float value, int format) { return format == 0 ? value : widen_bits(narrow_bits(value, format), format); }

}  // namespace vkattn::reference
