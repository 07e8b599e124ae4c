// AVX-512 scoring of 16 codebook entries per instruction (see book_search.h for the exact
// operation order every path shares).
// GCC 12 warns inside its own AVX-512 headers (a known false positive of its intrinsics).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "shared/rvq/book_search.h"
#include "shared/rvq/mul_exact_simd.h"

namespace waste::rvq_detail {

void scores_avx512(const float* q, const StageBook& b, float* out) {
  __m512 m[kVqDim];
  for (int d = 0; d < kVqDim; ++d) m[d] = _mm512_set1_ps(-2.0f * q[d]);
  for (int j = 0; j < kVqEntries; j += 16) {
    __m512 a = _mm512_load_ps(b.norms + j);
    for (int d = 0; d < kVqDim; ++d) a = _mm512_add_ps(a, mul_exact(m[d], _mm512_load_ps(&b.t[d][j])));
    _mm512_store_ps(out + j, a);
  }
}

int nearest_avx512(const float* q, const StageBook& b, float* best_score) {
  __m512 m[kVqDim];
  for (int d = 0; d < kVqDim; ++d) m[d] = _mm512_set1_ps(-2.0f * q[d]);
  __m512 best = _mm512_set1_ps(__builtin_inff());
  __m512i best_idx = _mm512_setzero_si512();
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  for (int j = 0; j < kVqEntries; j += 16) {
    __m512 a = _mm512_load_ps(b.norms + j);
    for (int d = 0; d < kVqDim; ++d) a = _mm512_add_ps(a, mul_exact(m[d], _mm512_load_ps(&b.t[d][j])));
    // Strictly less: a lane keeps its earliest minimum, as the scalar loop does.
    __mmask16 lt = _mm512_cmp_ps_mask(a, best, _CMP_LT_OQ);
    best = _mm512_mask_mov_ps(best, lt, a);
    best_idx = _mm512_mask_mov_epi32(best_idx, lt, idx);
    idx = _mm512_add_epi32(idx, step);
  }
  alignas(64) float v16[16];
  alignas(64) int32_t i16[16];
  _mm512_store_ps(v16, best);
  _mm512_store_si512(i16, best_idx);
  // Lowest index among the lanes holding the minimum.
  float v = v16[0];
  int r = i16[0];
  for (int l = 1; l < 16; ++l)
    if (v16[l] < v || (v16[l] == v && i16[l] < r)) { v = v16[l]; r = i16[l]; }
  if (best_score) *best_score = v;
  return r;
}

}  // namespace waste::rvq_detail
