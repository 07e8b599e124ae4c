// AVX-512 VNNI int8-activation Q8G/Q4G matvec/matmul (matvec_int8.h). vpdpbusd multiplies
// unsigned by signed bytes, so the weights enter as unsigned: Q4G nibbles are already q + 8,
// Q8G bytes get their sign bit flipped (q + 128); the excess (8 or 128 times the unit's sum
// of activations, exact integers computed with the activations) is subtracted afterwards.
// Per row, 16 units (512 columns) at a time: their integer sums are reduced into one vector
// (lane k = unit k), then one fma adds them into the 16 lane accumulators of the definition.
#include <immintrin.h>

// GCC 12's AVX-512 headers build pass-through operands from _mm512_undefined_*(), a
// self-initialized variable that -Wmaybe-uninitialized flags once inlined; it is not a bug.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>

#include "shared/kernels/matvec_int8.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/kernels/prefetch.h"

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

// The definition's final tree: lanes i + i+8, then + i+4, + i+2, + i+1.
inline float lane_tree(__m512 a) {
  const __m256 lo = _mm512_castps512_ps256(a);
  const __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(a, a, 0xee));  // 128-bit lanes 2, 3
  const __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __mmask64 byte_mask(int64_t bytes) { return bytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << bytes) - 1; }

struct Kernel {
  const MatrixView& w;
  const Int8Activations& act;
  int64_t groups, units_per_group, units, padded_units, cols;
  int group_shift;      // log2(units_per_group)
  __m512i scale_index;  // lane k -> group k / units_per_group within the block
  const int8_t* q;
  const int32_t* unit_sum;
  const float* unit_scale;

  Kernel(const MatrixView& w_, const Int8Activations& a)
      : w(w_), act(a), groups(w_.cols / w_.group), units_per_group(w_.group / 32), units(a.units),
        padded_units(a.padded_units), cols(w_.cols), group_shift(__builtin_ctzll(uint64_t(w_.group / 32))),
        q(a.q.data()), unit_sum(a.unit_sum.data()), unit_scale(a.unit_scale.data()) {
    alignas(64) int32_t idx[16];
    for (int k = 0; k < 16; ++k) idx[k] = int32_t(k / std::min<int64_t>(units_per_group, 16));
    scale_index = _mm512_load_si512(idx);
  }

  // f16 weight scales of units [u0, u0 + 16) of a row, as f32 (0 past the last unit).
  __m512 unit_scales(const uint16_t* srow, int64_t u0) const {
    const int64_t g0 = u0 >> group_shift;
    if (units_per_group >= 16) return _mm512_set1_ps(_cvtsh_ss(srow[g0]));
    const int64_t count = std::min<int64_t>(16, groups - g0);
    const __m256i h = _mm256_maskz_loadu_epi16(__mmask16((1u << count) - 1), srow + g0);
    const __m512 s = _mm512_cvtph_ps(h);
    return units_per_group == 1 ? s : _mm512_permutexvar_ps(scale_index, s);
  }

  // Adds units [u0, u0 + 16) of row r for tokens t0 .. t0+T into acc[T].
  template <int T>
  void accumulate(__m512i (&p)[T][4], const uint16_t* srow, int64_t u0, int64_t t0, int correction_shift,
                  __m512* acc) const {
    const __m512 ws = unit_scales(srow, u0);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int64_t at = (t0 + t) * padded_units + u0;
      const __m512i excess = _mm512_slli_epi32(_mm512_loadu_si512(unit_sum + at), correction_shift);
      const __m512i usum = _mm512_sub_epi32(reduce_units(p[t][0], p[t][1], p[t][2], p[t][3]), excess);
      const __m512 d = _mm512_mul_ps(ws, _mm512_loadu_ps(unit_scale + at));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(usum), d, acc[t]);
    }
  }

  // Q4G: 64 bytes hold 4 units; the low nibbles are the even columns, the high the odd ones,
  // matched by the EvenOdd activation layout.
  template <int T>
  void q4g_row(int64_t r, int64_t t0, float* y) const {
    const auto* wrow = static_cast<const uint8_t*>(w.data) + r * (cols / 2);
    const uint16_t* srow = w.scales + r * groups;
    if (t0 == 0 && r + kTrunkPrefetchRows < w.rows) {
      prefetch_range(wrow + kTrunkPrefetchRows * (cols / 2), cols / 2);
      prefetch_range(srow + kTrunkPrefetchRows * groups, groups * 2);
    }
    const __m512i nib = _mm512_set1_epi8(0x0f);
    __m512 acc[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t u0 = 0; u0 < units; u0 += 16) {
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
      accumulate<T>(p, srow, u0, t0, 3, acc);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) y[(t0 + t) * w.rows + r] = lane_tree(acc[t]);
  }

  // Q8G: 64 bytes hold 2 units (32 bytes each); two such products are folded into the
  // 4-partials-per-unit form reduce_units takes.
  template <int T>
  void q8g_row(int64_t r, int64_t t0, float* y) const {
    const auto* wrow = static_cast<const uint8_t*>(w.data) + r * cols;
    const uint16_t* srow = w.scales + r * groups;
    if (t0 == 0 && r + kTrunkPrefetchRows < w.rows) {
      prefetch_range(wrow + kTrunkPrefetchRows * cols, cols);
      prefetch_range(srow + kTrunkPrefetchRows * groups, groups * 2);
    }
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    __m512 acc[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    auto chunk = [&](int64_t first, __m512i* out) {  // units first, first + 1 -> out[t]
      const int64_t m = std::min<int64_t>(2, units - first);
      if (m <= 0) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) out[t] = _mm512_setzero_si512();
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
        out[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
      }
    };
    for (int64_t u0 = 0; u0 < units; u0 += 16) {
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
      accumulate<T>(p, srow, u0, t0, 7, acc);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) y[(t0 + t) * w.rows + r] = lane_tree(acc[t]);
  }

  template <int T>
  void row(int64_t r, int64_t t0, float* y) const {
    if (w.format == TensorFormat::Q4G) q4g_row<T>(r, t0, y);
    else q8g_row<T>(r, t0, y);
  }
};

}  // namespace

void matmul_int8_avx512(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const Int8Activations& act =
      quantize_for(w, x, n, w.format == TensorFormat::Q4G ? Int8Layout::EvenOdd : Int8Layout::Natural);
  const Kernel k(w, act);
  // Rows outermost: a row is read from memory once and stays in L1 for every token tile.
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t r = row_begin; r < row_end; ++r)
      for (int64_t t0 = 0; t0 < n; t0 += 4) {
        switch (std::min<int64_t>(4, n - t0)) {
          case 4: k.row<4>(r, t0, y); break;
          case 3: k.row<3>(r, t0, y); break;
          case 2: k.row<2>(r, t0, y); break;
          default: k.row<1>(r, t0, y); break;
        }
      }
  });
}

}  // namespace waste
