// NEON scoring of 4 codebook entries per instruction (the algorithm: book_search_simd.h).
#include "shared/kernels/simd_traits.h"
#include "shared/rvq/book_search_simd.h"

namespace waste::rvq_detail {

void scores_neon(const float* q, const StageBook& b, float* out) { scores<simd::Neon>(q, b, out); }

int nearest_neon(const float* q, const StageBook& b, float* best_score) { return nearest<simd::Neon>(q, b, best_score); }

}  // namespace waste::rvq_detail
