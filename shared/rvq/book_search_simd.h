// Internal: the SIMD codebook search of book_search.h, written once over an instruction set
// `Isa` (shared/kernels/simd_traits.h): kLanes entries scored per instruction, in the exact
// operation order book_search.h defines (multiply by mul_exact, then add, dimension by
// dimension), so every path gives the scalar scores bit for bit. Include only from
// book_search_avx2.cpp / book_search_avx512.cpp / book_search_neon.cpp (internal linkage, see
// simd_traits.h).
#pragma once
#include "shared/rvq/book_search.h"

namespace waste::rvq_detail {
namespace {

// Scores of entries [j, j + kLanes) given m_d = -2 q_d.
template <class Isa>
inline typename Isa::V score_lanes(const typename Isa::V* m, const StageBook& b, int j) {
  auto a = Isa::load_aligned(b.norms + j);
  for (int d = 0; d < kVqDim; ++d) a = Isa::add(a, Isa::mul_exact(m[d], Isa::load_aligned(&b.t[d][j])));
  return a;
}

template <class Isa>
void scores(const float* q, const StageBook& b, float* out) {
  typename Isa::V m[kVqDim];
  for (int d = 0; d < kVqDim; ++d) m[d] = Isa::set1(-2.0f * q[d]);
  for (int j = 0; j < kVqEntries; j += Isa::kLanes) Isa::store_aligned(out + j, score_lanes<Isa>(m, b, j));
}

template <class Isa>
int nearest(const float* q, const StageBook& b, float* best_score) {
  constexpr int L = Isa::kLanes;
  typename Isa::V m[kVqDim];
  for (int d = 0; d < kVqDim; ++d) m[d] = Isa::set1(-2.0f * q[d]);
  auto best = Isa::set1(__builtin_inff());
  auto best_idx = Isa::set1_i(0);
  auto idx = Isa::iota();
  const auto step = Isa::set1_i(L);
  for (int j = 0; j < kVqEntries; j += L) {
    // Strictly less: a lane keeps its earliest minimum, as the scalar loop does.
    Isa::keep_less(score_lanes<Isa>(m, b, j), idx, best, best_idx);
    idx = Isa::add_i(idx, step);
  }
  alignas(64) float v[L];
  alignas(64) int32_t ix[L];
  Isa::store_aligned(v, best);
  Isa::store_i(ix, best_idx);
  // Lowest index among the lanes holding the minimum.
  int r = ix[0];
  float bv = v[0];
  for (int l = 1; l < L; ++l)
    if (v[l] < bv || (v[l] == bv && ix[l] < r)) { bv = v[l]; r = ix[l]; }
  if (best_score) *best_score = bv;
  return r;
}

}  // namespace
}  // namespace waste::rvq_detail
