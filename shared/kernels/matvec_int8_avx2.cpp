// AVX2 int8-activation Q8G/Q4G matvec/matmul (matvec_int8.h): vpmaddubsw (unsigned x signed
// bytes -> pairs of 16-bit sums) then vpmaddwd by ones (-> 32-bit). Q4G nibbles enter as
// the unsigned q + 8 and 8 x the unit's activation sum is subtracted afterwards (products
// stay within 2 x 15 x 127, no 16-bit saturation); Q8G multiplies |w| by x with w's sign
// (2 x 128 x 127 fits in 16 bits). The 16 lanes of the definition are two ymm (units 0-7 and
// 8-15 of each 512-column block), each fed by the integer sums of 8 units reduced together.
// One token per pass over a row. The algorithm shared with AVX-512: matvec_int8_simd.h;
// here are the AVX2 operations it runs on.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "shared/kernels/matvec_int8_simd.h"
#include "shared/kernels/simd_traits.h"

namespace waste {
namespace {

// Four vectors of two units each (128-bit lane h of vector i: four partial sums of unit
// 2i + h) -> the 8 unit sums in unit order.
inline __m256i reduce_units(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  // hadd of hadds: lane 0 holds units 0 2 4 6, lane 1 units 1 3 5 7.
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i load16(const void* p) { return _mm256_zextsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p))); }

struct Ops : kernel_detail::Int8Shape {
  struct F { __m256 lo, hi; };   // lanes 0-7, 8-15
  struct I { __m256i lo, hi; };
  static constexpr int kTokenTile = 1;
  static constexpr int kRowTile = 1;
  static constexpr bool kPrefetchBurst = false;  // prefetch.h: measured on this path
  static constexpr int64_t kPrefetchSpreadAbove = kTrunkPrefetchSpreadAboveAvx2;
  static constexpr int kQ4Shift = 3, kQ8Shift = 0;  // nibbles are q + 8; Q8G: sign trick, no excess
  __m256i index_lo, index_hi;  // lane k of a block half -> its group within the block

  Ops(const MatrixView& w_, const Int8Activations& a) : Int8Shape(w_, a) {
    alignas(32) int32_t lo[8], hi[8];
    const int64_t s = std::max<int64_t>(1, std::min<int64_t>(units_per_group, 16));
    for (int k = 0; k < 8; ++k) {
      lo[k] = int32_t(k / s);
      hi[k] = int32_t((k + 8) / s);
    }
    index_lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
    index_hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
  }

  static F fzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static F load_f(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static F cvt(I v) { return {_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }
  static F mul(F a, F b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static F fma(F a, F b, F c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static I sub_shifted(I s, const int32_t* p, int shift) {
    return {_mm256_sub_epi32(s.lo, _mm256_slli_epi32(load32(p), shift)),
            _mm256_sub_epi32(s.hi, _mm256_slli_epi32(load32(p + 8), shift))};
  }
  // The definition's final tree over lanes lo[0..7], hi[0..7] (= lanes 8..15).
  static float lane_tree(F a) { return simd::Avx2::sum(_mm256_add_ps(a.lo, a.hi)); }

  // f16 weight scales of units [u0, u0 + 16) of a row as f32 (0 past the last unit).
  F unit_scales(const uint16_t* srow, int64_t u0) const {
    const int64_t g0 = u0 >> group_shift;
    if (units_per_group >= 16) {
      const __m256 s = _mm256_set1_ps(_cvtsh_ss(srow[g0]));
      return {s, s};
    }
    const int64_t count = std::min<int64_t>(units_per_group == 1 ? 16 : 8, groups - g0);
    alignas(32) uint16_t buf[16] = {};
    const uint16_t* s = srow + g0;
    if (count < (units_per_group == 1 ? 16 : 8)) {
      std::memcpy(buf, s, size_t(count) * 2);
      s = buf;
    }
    const __m256 first = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    if (units_per_group == 1) return {first, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 8)))};
    return {_mm256_permutevar8x32_ps(first, index_lo), _mm256_permutevar8x32_ps(first, index_hi)};
  }

  // Q4G: units first, first + 1 (32 bytes, the second may be missing) times one token's
  // EvenOdd activations -> [4 partial sums of each unit].
  __m256i q4g_pair(const uint8_t* wrow, const int8_t* xt, int64_t first) const {
    const int64_t m = std::min<int64_t>(2, units - first);
    if (m <= 0) return _mm256_setzero_si256();
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const int64_t block = first & ~int64_t(3), in_block = std::min<int64_t>(4, units - block);
    const int8_t* even = xt + block * 32 + 16 * (first - block);
    const int8_t* odd = even + 16 * in_block;
    const __m256i wv = m == 2 ? load32(wrow + first * 16) : load16(wrow + first * 16);
    const __m256i lo = _mm256_and_si256(wv, nib), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), nib);
    const __m256i e = m == 2 ? load32(even) : load16(even), o = m == 2 ? load32(odd) : load16(odd);
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, e), _mm256_maddubs_epi16(hi, o));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  }

  // Q8G: one unit (32 bytes) times one token -> 8 partial sums.
  __m256i q8g_unit(const int8_t* wrow, const int8_t* xt, int64_t u) const {
    if (u >= units) return _mm256_setzero_si256();
    const __m256i wv = load32(wrow + u * 32), xv = load32(xt + u * 32);
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  }

  // The integer sums of units [h0, h0 + 8) for one token.
  __m256i q4g_half(const uint8_t* wrow, const int8_t* xt, int64_t h0) const {
    __m256i v[4];
    for (int j = 0; j < 4; ++j) v[j] = q4g_pair(wrow, xt, h0 + 2 * j);
    return reduce_units(v[0], v[1], v[2], v[3]);
  }
  __m256i q8g_half(const int8_t* wrow, const int8_t* xt, int64_t h0) const {
    __m256i v[4];
    for (int j = 0; j < 4; ++j) {
      const __m256i a = q8g_unit(wrow, xt, h0 + 2 * j), b = q8g_unit(wrow, xt, h0 + 2 * j + 1);
      v[j] = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
    }
    return reduce_units(v[0], v[1], v[2], v[3]);
  }

  template <int T>
  void q4g_sums(const uint8_t* wrow, int64_t t0, int64_t u0, I* out) const {
    for (int t = 0; t < T; ++t) {
      const int8_t* xt = q + (t0 + t) * cols;
      out[t] = {q4g_half(wrow, xt, u0), q4g_half(wrow, xt, u0 + 8)};
    }
  }
  template <int T>
  void q8g_sums(const int8_t* wrow, int64_t t0, int64_t u0, I* out) const {
    for (int t = 0; t < T; ++t) {
      const int8_t* xt = q + (t0 + t) * cols;
      out[t] = {q8g_half(wrow, xt, u0), q8g_half(wrow, xt, u0 + 8)};
    }
  }
};

}  // namespace

void matmul_int8_avx2(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul_int8<Ops>(w, x, n, y, pool);
}

}  // namespace waste
