// IEEE half (f16) and bfloat16 conversions, exact and portable (no F16C needed).
#pragma once
#include <cstdint>
#include <cstring>

namespace waste {

inline float bits_to_f32(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }

// Round-to-nearest-even, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    // Subnormal: value = man * 2^-24.
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

// Round-to-nearest-even; overflow saturates to infinity as IEEE does.
inline uint16_t f32_to_f16(float f) {
  uint32_t b = f32_to_bits(f);
  uint32_t sign = (b >> 16) & 0x8000u;
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);          // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);         // >= 65520 rounds to inf
  if (abs < 0x38800000u) {                                         // below 2^-14: subnormal or zero
    float a = bits_to_f32(abs);
    // Scaling by 2^24 puts the subnormal step at 1.0; nearbyint-like rounding via the magic add.
    float scaled = a * 16777216.0f;
    uint32_t m = uint32_t(scaled);
    float rem = scaled - float(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return uint16_t(sign | m);
  }
  uint32_t exp = ((abs >> 23) - 112) << 10;
  uint32_t man = (abs >> 13) & 0x3ffu;
  uint32_t rest = abs & 0x1fffu;
  uint32_t h = exp | man;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

}  // namespace waste
