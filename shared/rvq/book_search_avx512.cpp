// AVX-512 scoring of 16 codebook entries per instruction (the algorithm: book_search_simd.h).
#include "shared/kernels/simd_traits.h"
#include "shared/rvq/book_search_simd.h"

namespace waste::rvq_detail {

void scores_avx512(const float* q, const StageBook& b, float* out) { scores<simd::Avx512>(q, b, out); }

int nearest_avx512(const float* q, const StageBook& b, float* best_score) { return nearest<simd::Avx512>(q, b, best_score); }

}  // namespace waste::rvq_detail
