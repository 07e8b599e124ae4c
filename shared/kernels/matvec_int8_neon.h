// Internal: the aarch64 operations of the int8-activation Q8G/Q4G matvec/matmul
// (matvec_int8.h, the algorithm in matvec_int8_simd.h). Three files instantiate them, each
// compiled with its own -march (meson: shared_neon*_sources), and each chosen at run time
// (matvec.cpp): matvec_int8_neon.cpp (ARMv8.0: SMULL/SMLAL into 16 bits, SADALP into 32),
// matvec_int8_neon_dotprod.cpp (SDOT) and matvec_int8_neon_i8mm.cpp (SMMLA for two rows x two
// tokens, SDOT for a row left over). Include only from those files (internal linkage, see
// simd_traits.h).
//
// What differs from x86 in kind: NEON multiplies signed by signed bytes, so Q8G needs no
// excess (kQ8Shift = 0); Q4G nibbles still enter as the unsigned q + 8 (one AND / one USHR per
// 16 bytes, not a subtract more) and 8 x the unit's activation sum comes off afterwards, as on
// x86. The 16 lanes of the definition are four q registers (units 0-3, 4-7, 8-11, 12-15 of a
// 16-unit block).
//
// A Dot policy gives the products of one 32-column unit as 4 int32 partial sums:
//   q4(lo, hi, even, odd): lo / hi = the unit's 16 weight bytes' low / high nibbles (0..15),
//     even / odd = the unit's 16 even / 16 odd activations (the EvenOdd layout);
//   q8(w0, w1, x0, x1): the unit's 32 weights and 32 activations, 16 and 16.
#pragma once
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "shared/kernels/matvec_int8_simd.h"
#include "shared/kernels/simd_traits.h"

namespace waste::kernel_detail {
namespace {

struct NeonF { float32x4_t v[4]; };  // lanes 0-3, 4-7, 8-11, 12-15 of the definition
struct NeonI { int32x4_t v[4]; };

// Four vectors of 4 partial sums of units 0, 1, 2, 3 -> one vector of the 4 unit sums (ADDP
// adds neighbours: [p0 0+1, p0 2+3, p1 0+1, p1 2+3], twice). Integer sums: any order is exact.
inline int32x4_t reduce4(int32x4_t p0, int32x4_t p1, int32x4_t p2, int32x4_t p3) {
  return vpaddq_s32(vpaddq_s32(p0, p1), vpaddq_s32(p2, p3));
}

template <class Dot>
struct NeonInt8Ops : Int8Shape {
  using F = NeonF;
  using I = NeonI;
  static constexpr int kTokenTile = 2;  // 2 tokens x 4 units of partials + weights: 32 registers
  static constexpr int kRowTile = 1;
  // Not measured on ARM hardware (only qemu here): off until a waste-bench-trunk run on a
  // real core shows the gain the AVX-512 path measured (prefetch.h).
  static constexpr bool kPrefetchBurst = false;
  static constexpr int64_t kPrefetchSpreadAbove = kTrunkPrefetchSpreadNever;
  static constexpr int kQ4Shift = 3, kQ8Shift = 0;  // nibbles are q + 8; signed x signed Q8G

  NeonInt8Ops(const MatrixView& w_, const Int8Activations& a) : Int8Shape(w_, a) {}

  static F fzero() {
    const float32x4_t z = vdupq_n_f32(0.0f);
    return {{z, z, z, z}};
  }
  static F load_f(const float* p) { return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}}; }
  static F cvt(I v) {  // SCVTF rounds to nearest even, as float(int32_t) in the scalar path
    return {{vcvtq_f32_s32(v.v[0]), vcvtq_f32_s32(v.v[1]), vcvtq_f32_s32(v.v[2]), vcvtq_f32_s32(v.v[3])}};
  }
  static F mul(F a, F b) {
    F r;
    for (int i = 0; i < 4; ++i) r.v[i] = vmulq_f32(a.v[i], b.v[i]);
    return r;
  }
  static F fma(F a, F b, F c) {  // c + a*b, one rounding: std::fma of the scalar path
    F r;
    for (int i = 0; i < 4; ++i) r.v[i] = vfmaq_f32(c.v[i], a.v[i], b.v[i]);
    return r;
  }
  static I sub_shifted(I s, const int32_t* p, int shift) {
    const int32x4_t sh = vdupq_n_s32(shift);
    I r;
    for (int i = 0; i < 4; ++i) r.v[i] = vsubq_s32(s.v[i], vshlq_s32(vld1q_s32(p + 4 * i), sh));
    return r;
  }
  // The definition's tree: lanes i + i+8 (v0 + v2, v1 + v3), then i + i+4, then i + i+2
  // (upper half onto lower), then the last two.
  static float lane_tree(F a) {
    const float32x4_t s4 = vaddq_f32(vaddq_f32(a.v[0], a.v[2]), vaddq_f32(a.v[1], a.v[3]));
    const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
  }

  // f16 weight scales of units [u0, u0 + 16) of a row as f32 (0 past the last unit).
  F unit_scales(const uint16_t* srow, int64_t u0) const {
    const int64_t g0 = u0 >> group_shift;
    if (units_per_group >= 16) {
      const float32x4_t s = vdupq_n_f32(simd::Neon::f16(srow[g0]));
      return {{s, s, s, s}};
    }
    // 16 / units_per_group groups in the block (16, 8, 4 or 2), fewer at the row's end.
    const int64_t want = 16 / units_per_group, count = std::min<int64_t>(want, groups - g0);
    alignas(16) uint16_t buf[16] = {};
    const uint16_t* s = srow + g0;
    if (count < want || want < 8) {  // a partial block, or fewer than one 8-scale load
      std::memcpy(buf, s, size_t(count) * 2);
      s = buf;
    }
    const uint16x8_t h = vld1q_u16(s);
    const float32x4_t f0 = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
    const float32x4_t f1 = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)));
    switch (units_per_group) {
      case 1: {
        const uint16x8_t h2 = vld1q_u16(s + 8);
        return {{f0, f1, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h2))),
                 vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h2)))}};
      }
      case 2: return {{vzip1q_f32(f0, f0), vzip2q_f32(f0, f0), vzip1q_f32(f1, f1), vzip2q_f32(f1, f1)}};
      case 4: return {{vdupq_laneq_f32(f0, 0), vdupq_laneq_f32(f0, 1), vdupq_laneq_f32(f0, 2), vdupq_laneq_f32(f0, 3)}};
      default: {  // 8 units per group: two groups in the block
        const float32x4_t a = vdupq_laneq_f32(f0, 0), b = vdupq_laneq_f32(f0, 1);
        return {{a, a, b, b}};
      }
    }
  }

  // Q4G units [b, b + 4) (m of them exist, Full: all 4) for tokens t0 .. t0+T -> out[t].
  // In the EvenOdd layout unit b + i has its evens at b*32 + 16i and its odds 16m later.
  template <bool Full, int T>
  void q4_quad(const uint8_t* wrow, int64_t t0, int64_t b, int64_t m, int32x4_t* out) const {
    if constexpr (Full) m = 4;
    int32x4_t p[T][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      if (!Full && i >= m) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) p[t][i] = vdupq_n_s32(0);
        continue;
      }
      const uint8x16_t wv = vld1q_u8(wrow + (b + i) * 16);
      const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(wv, vdupq_n_u8(0x0f)));
      const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(wv, 4));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* even = q + (t0 + t) * cols + b * 32 + 16 * i;
        p[t][i] = Dot::q4(lo, hi, vld1q_s8(even), vld1q_s8(even + 16 * m));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) out[t] = reduce4(p[t][0], p[t][1], p[t][2], p[t][3]);
  }

  template <int T>
  void q4g_sums(const uint8_t* wrow, int64_t t0, int64_t u0, I* out) const {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int64_t b = u0 + 4 * j, m = std::clamp<int64_t>(units - b, 0, 4);
      int32x4_t o[T];
      if (m == 4) q4_quad<true, T>(wrow, t0, b, 4, o);
      else q4_quad<false, T>(wrow, t0, b, m, o);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) out[t].v[j] = o[t];
    }
  }

  // Q8G units [b, b + 4): 32 weight bytes and 32 activations each, in natural order.
  template <bool Full, int T>
  void q8_quad(const int8_t* wrow, int64_t t0, int64_t b, int64_t m, int32x4_t* out) const {
    int32x4_t p[T][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      if (!Full && i >= m) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) p[t][i] = vdupq_n_s32(0);
        continue;
      }
      const int8x16_t w0 = vld1q_s8(wrow + (b + i) * 32), w1 = vld1q_s8(wrow + (b + i) * 32 + 16);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* xa = q + (t0 + t) * cols + (b + i) * 32;
        p[t][i] = Dot::q8(w0, w1, vld1q_s8(xa), vld1q_s8(xa + 16));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) out[t] = reduce4(p[t][0], p[t][1], p[t][2], p[t][3]);
  }

  template <int T>
  void q8g_sums(const int8_t* wrow, int64_t t0, int64_t u0, I* out) const {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int64_t b = u0 + 4 * j, m = std::clamp<int64_t>(units - b, 0, 4);
      int32x4_t o[T];
      if (m == 4) q8_quad<true, T>(wrow, t0, b, 4, o);
      else q8_quad<false, T>(wrow, t0, b, m, o);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) out[t].v[j] = o[t];
    }
  }
};

}  // namespace
}  // namespace waste::kernel_detail
