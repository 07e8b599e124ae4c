// AVX2 scoring of 8 codebook entries per instruction (see book_search.h for the exact
// operation order every path shares).
#include <immintrin.h>

#include "shared/rvq/book_search.h"
#include "shared/rvq/mul_exact_simd.h"

namespace waste::rvq_detail {

void scores_avx2(const float* q, const StageBook& b, float* out) {
  __m256 m[kVqDim];
  for (int d = 0; d < kVqDim; ++d) m[d] = _mm256_set1_ps(-2.0f * q[d]);
  for (int j = 0; j < kVqEntries; j += 8) {
    __m256 a = _mm256_load_ps(b.norms + j);
    for (int d = 0; d < kVqDim; ++d) a = _mm256_add_ps(a, mul_exact(m[d], _mm256_load_ps(&b.t[d][j])));
    _mm256_store_ps(out + j, a);
  }
}

int nearest_avx2(const float* q, const StageBook& b, float* best_score) {
  __m256 m[kVqDim];
  for (int d = 0; d < kVqDim; ++d) m[d] = _mm256_set1_ps(-2.0f * q[d]);
  __m256 best = _mm256_set1_ps(__builtin_inff());
  __m256i best_idx = _mm256_setzero_si256();
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  for (int j = 0; j < kVqEntries; j += 8) {
    __m256 a = _mm256_load_ps(b.norms + j);
    for (int d = 0; d < kVqDim; ++d) a = _mm256_add_ps(a, mul_exact(m[d], _mm256_load_ps(&b.t[d][j])));
    __m256 lt = _mm256_cmp_ps(a, best, _CMP_LT_OQ);  // strictly less keeps the earliest minimum
    best = _mm256_blendv_ps(best, a, lt);
    best_idx = _mm256_blendv_epi8(best_idx, idx, _mm256_castps_si256(lt));
    idx = _mm256_add_epi32(idx, step);
  }
  alignas(32) float v[8];
  alignas(32) int32_t ix[8];
  _mm256_store_ps(v, best);
  _mm256_store_si256(reinterpret_cast<__m256i*>(ix), best_idx);
  int r = ix[0];
  float bv = v[0];
  for (int l = 1; l < 8; ++l)
    if (v[l] < bv || (v[l] == bv && ix[l] < r)) { bv = v[l]; r = ix[l]; }
  if (best_score) *best_score = bv;
  return r;
}

}  // namespace waste::rvq_detail
