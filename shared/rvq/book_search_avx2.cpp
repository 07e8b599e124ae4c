// AVX2 scoring of 8 codebook entries per instruction (the algorithm: book_search_simd.h).
#include "shared/kernels/simd_traits.h"
#include "shared/rvq/book_search_simd.h"

namespace waste::rvq_detail {

void scores_avx2(const float* q, const StageBook& b, float* out) { scores<simd::Avx2>(q, b, out); }

int nearest_avx2(const float* q, const StageBook& b, float* best_score) { return nearest<simd::Avx2>(q, b, best_score); }

}  // namespace waste::rvq_detail
