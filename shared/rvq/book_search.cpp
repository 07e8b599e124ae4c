#include "shared/rvq/book_search.h"

#include "shared/rvq/mul_exact.h"
#include "shared/util/cpu.h"

namespace waste::rvq_detail {

void prepare_stage(const float* entries, StageBook& b) {
  for (int j = 0; j < kVqEntries; ++j) {
    const float* c = entries + size_t(j) * kVqDim;
    float n = 0;
    for (int d = 0; d < kVqDim; ++d) {
      b.t[d][j] = c[d];
      b.rows[j][d] = c[d];
      n = n + mul_exact(c[d], c[d]);  // unfused: the same norms on every architecture
    }
    b.norms[j] = n;
  }
}

void prepare_books(const float* books, PreparedBooks& out) {
  for (int s = 0; s < kVqStages; ++s) prepare_stage(books + size_t(s) * kVqEntries * kVqDim, out.stage[s]);
}

void scores_scalar(const float* q, const StageBook& b, float* out) {
  float m[kVqDim];
  for (int d = 0; d < kVqDim; ++d) m[d] = -2.0f * q[d];
  for (int j = 0; j < kVqEntries; ++j) out[j] = b.norms[j];
  for (int d = 0; d < kVqDim; ++d)
    for (int j = 0; j < kVqEntries; ++j) out[j] = out[j] + mul_exact(m[d], b.t[d][j]);
}

int nearest_scalar(const float* q, const StageBook& b, float* best_score) {
  alignas(64) float s[kVqEntries];
  scores_scalar(q, b, s);
  int best = 0;
  for (int j = 1; j < kVqEntries; ++j)
    if (s[j] < s[best]) best = j;
  if (best_score) *best_score = s[best];
  return best;
}

ScoresFn scores_fn() {
#if defined(__x86_64__)
  switch (simd_level()) {
    case SimdLevel::Avx512: return scores_avx512;
    case SimdLevel::Avx2: return scores_avx2;
    default: break;
  }
#elif defined(__aarch64__)
  if (simd_level() == SimdLevel::Neon) return scores_neon;
#endif
  return scores_scalar;
}

NearestFn nearest_fn() {
#if defined(__x86_64__)
  switch (simd_level()) {
    case SimdLevel::Avx512: return nearest_avx512;
    case SimdLevel::Avx2: return nearest_avx2;
    default: break;
  }
#elif defined(__aarch64__)
  if (simd_level() == SimdLevel::Neon) return nearest_neon;
#endif
  return nearest_scalar;
}

}  // namespace waste::rvq_detail
