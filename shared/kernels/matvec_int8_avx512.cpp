// AVX-512 VNNI int8-activation Q8G/Q4G matvec/matmul (matvec_int8.h). vpdpbusd multiplies
// unsigned by signed bytes, so the weights enter as unsigned: Q4G nibbles are already q + 8,
// Q8G bytes get their sign bit flipped (q + 128); the excess (8 or 128 times the unit's sum
// of activations, exact integers computed with the activations) is subtracted afterwards.
// Per row, 16 units (512 columns) at a time: their integer sums are reduced into one vector
// (lane k = unit k), then one fma adds them into the 16 lane accumulators of the definition
// (one zmm). Up to 4 tokens per pass over a row. The algorithm shared with AVX2:
// matvec_int8_simd.h; here are the AVX-512 operations it runs on.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "shared/kernels/matvec_int8_simd.h"
#include "shared/kernels/simd_traits.h"

namespace waste {
namespace {

// Four vectors whose 128-bit lane k holds four partial sums of unit 4i + k (vector i) ->
// one vector of the 16 unit sums in unit order.
inline __m512i reduce_units(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
  const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
  // Lane 4k + i of r holds unit 4i + k.
  const __m512i r = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(order, r);
}

inline __mmask64 byte_mask(int64_t bytes) { return bytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << bytes) - 1; }

struct Ops : kernel_detail::Int8Shape {
  using F = __m512;
  using I = __m512i;
  static constexpr int kTokenTile = 4;
  static constexpr int kRowTile = 1;
  static constexpr bool kPrefetchBurst = true;  // prefetch.h: both forms measured on this path
  static constexpr int64_t kPrefetchSpreadAbove = kTrunkPrefetchSpreadAboveAvx512;
  static constexpr int kQ4Shift = 3, kQ8Shift = 7;  // nibbles are q + 8, Q8G bytes q + 128
  static constexpr QuantizeUnitsFn quantize_units = quantize_units_avx512;
  __m512i scale_index;  // lane k -> group k / units_per_group within the block

  Ops(const MatrixView& w_, const Int8Activations& a) : Int8Shape(w_, a) {
    alignas(64) int32_t idx[16];
    for (int k = 0; k < 16; ++k) idx[k] = int32_t(k / std::min<int64_t>(units_per_group, 16));
    scale_index = _mm512_load_si512(idx);
  }

  static F fzero() { return _mm512_setzero_ps(); }
  static F load_f(const float* p) { return _mm512_loadu_ps(p); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static I sub_shifted(I s, const int32_t* p, int shift) {
    return _mm512_sub_epi32(s, _mm512_slli_epi32(_mm512_loadu_si512(p), shift));
  }
  // The definition's final tree: lanes i + i+8 (128-bit lanes 2, 3 onto 0, 1), then as AVX2.
  static float lane_tree(F a) {
    const __m256 lo = _mm512_castps512_ps256(a);
    const __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(a, a, 0xee));
    return simd::Avx2::sum(_mm256_add_ps(lo, hi));
  }

  // f16 weight scales of units [u0, u0 + 16) of a row, as f32 (0 past the last unit).
  F unit_scales(const uint16_t* srow, int64_t u0) const {
    const int64_t g0 = u0 >> group_shift;
    if (units_per_group >= 16) return _mm512_set1_ps(_cvtsh_ss(srow[g0]));
    const int64_t count = std::min<int64_t>(16, groups - g0);
    const __m256i h = _mm256_maskz_loadu_epi16(__mmask16((1u << count) - 1), srow + g0);
    const __m512 s = _mm512_cvtph_ps(h);
    return units_per_group == 1 ? s : _mm512_permutexvar_ps(scale_index, s);
  }

  // Q4G: 64 bytes hold 4 units; the low nibbles are the even columns, the high the odd ones,
  // matched by the EvenOdd activation layout.
  template <int T>
  void q4g_sums(const uint8_t* wrow, int64_t t0, int64_t u0, I* out) const {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    __m512i p[T][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int64_t first = u0 + 4 * j, m = std::min<int64_t>(4, units - first);
      if (m <= 0) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) p[t][j] = _mm512_setzero_si512();
        continue;
      }
      const __mmask64 mask = byte_mask(16 * m);
      const __m512i wv = m == 4 ? _mm512_loadu_si512(wrow + first * 16) : _mm512_maskz_loadu_epi8(mask, wrow + first * 16);
      const __m512i lo = _mm512_and_si512(wv, nib);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), nib);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* xa = q + (t0 + t) * cols + first * 32;
        const __m512i even = m == 4 ? _mm512_loadu_si512(xa) : _mm512_maskz_loadu_epi8(mask, xa);
        const __m512i odd = m == 4 ? _mm512_loadu_si512(xa + 64) : _mm512_maskz_loadu_epi8(mask, xa + 16 * m);
        p[t][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, even), hi, odd);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) out[t] = reduce_units(p[t][0], p[t][1], p[t][2], p[t][3]);
  }

  // Q8G: 64 bytes hold 2 units (32 bytes each); two such products are folded into the
  // 4-partials-per-unit form reduce_units takes.
  template <int T>
  void q8g_sums(const int8_t* wrow, int64_t t0, int64_t u0, I* out) const {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    auto chunk = [&](int64_t first, __m512i* o) {  // units first, first + 1 -> o[t]
      const int64_t m = std::min<int64_t>(2, units - first);
      if (m <= 0) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) o[t] = _mm512_setzero_si512();
        return;
      }
      const __mmask64 mask = byte_mask(32 * m);
      // Masked-out bytes become 0x80 after the flip; their activations load as 0.
      const __m512i wv = _mm512_xor_si512(
          m == 2 ? _mm512_loadu_si512(wrow + first * 32) : _mm512_maskz_loadu_epi8(mask, wrow + first * 32), flip);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* xa = q + (t0 + t) * cols + first * 32;
        const __m512i xv = m == 2 ? _mm512_loadu_si512(xa) : _mm512_maskz_loadu_epi8(mask, xa);
        o[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
      }
    };
    __m512i p[T][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __m512i a[T], b[T];
      chunk(u0 + 4 * j, a);
      chunk(u0 + 4 * j + 2, b);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)  // 128-bit lanes [a0 a1 b0 b1] of units a, b, c, d -> [a b c d]
        p[t][j] = _mm512_add_epi32(_mm512_shuffle_i64x2(a[t], b[t], 0x88), _mm512_shuffle_i64x2(a[t], b[t], 0xdd));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) out[t] = reduce_units(p[t][0], p[t][1], p[t][2], p[t][3]);
  }
};

}  // namespace

// quantize_units_scalar's definition on 32 inputs at a time (the unit of every group the SIMD
// paths take). Finite iff x - x == 0 (inf - inf and NaN are NaN). The clamp comes before the
// rounding here, after it in the definition: the same integer for every value (both give
// +-127 for |v| >= 127), and max_ps returns its second operand, -127, for a NaN product (0 *
// inf when the unit's largest value is tiny) as std::max(-127.f, NaN) does. cvtps rounds half
// to even as nearbyint does in the default mode.
void quantize_units_avx512(const float* xt, int64_t units, int64_t unit, int8_t* q, float* unit_scale,
                           int32_t* unit_sum) {
  if (unit != 32) {
    quantize_units_scalar(xt, units, unit, q, unit_scale, unit_sum);
    return;
  }
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f), zero = _mm512_setzero_ps();
  for (int64_t k = 0; k < units; ++k) {
    const __m512 a = _mm512_loadu_ps(xt + 32 * k), b = _mm512_loadu_ps(xt + 32 * k + 16);
    const __mmask16 fa = _mm512_cmp_ps_mask(_mm512_sub_ps(a, a), zero, _CMP_EQ_OQ);
    const __mmask16 fb = _mm512_cmp_ps_mask(_mm512_sub_ps(b, b), zero, _CMP_EQ_OQ);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const bool finite = fa == 0xffff && fb == 0xffff;
    int8_t* qk = q + 32 * k;
    if (!finite || amax == 0) {
      unit_scale[k] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      unit_sum[k] = 0;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qk), _mm256_setzero_si256());
      continue;
    }
    unit_scale[k] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(127.0f / amax);
    const __m512i ia = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(a, inv), lo), hi));
    const __m512i ib = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(b, inv), lo), hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qk), _mm512_cvtepi32_epi8(ia));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qk + 16), _mm512_cvtepi32_epi8(ib));
    unit_sum[k] = _mm512_reduce_add_epi32(_mm512_add_epi32(ia, ib));
  }
}

void matmul_int8_avx512(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul_int8<Ops>(w, x, n, y, pool);
}

}  // namespace waste
