// Nearest-entry search in one 256-entry stage codebook, the inner loop of VQ3R training and
// encoding. Internal to shared/rvq. A stage is kept transposed ([8][256]) with its squared
// norms so 16 entries are scored per AVX-512 instruction.
//
// score(j) = |c_j|^2 - 2 <q, c_j>  (= |q - c_j|^2 - |q|^2), computed as
//   norms[j] + m_0*c_j0 + m_1*c_j1 + ... + m_7*c_j7 with m_d = -2 q_d, in that order with
// separate multiply and add, so every path gives bit-identical scores and the same argmin
// (ties go to the lowest index).
#pragma once
#include <cstdint>

#include "shared/container/format.h"

namespace waste::rvq_detail {

struct StageBook {
  alignas(64) float t[kVqDim][kVqEntries];  // transposed entries
  alignas(64) float norms[kVqEntries];      // |c_j|^2
  alignas(64) float rows[kVqEntries][kVqDim];  // entries as stored (for residual updates)
};

struct PreparedBooks {
  StageBook stage[kVqStages];
};
// One stage's 256 entries (row-major [256][8]) into its search layout; prepare_books does all three.
void prepare_stage(const float* entries, StageBook& b);
void prepare_books(const float* books, PreparedBooks& out);

using ScoresFn = void (*)(const float* q, const StageBook& b, float* out);  // out[256]
using NearestFn = int (*)(const float* q, const StageBook& b, float* best_score);

void scores_scalar(const float* q, const StageBook& b, float* out);
int nearest_scalar(const float* q, const StageBook& b, float* best_score);
#if defined(__x86_64__)
void scores_avx2(const float* q, const StageBook& b, float* out);
int nearest_avx2(const float* q, const StageBook& b, float* best_score);
void scores_avx512(const float* q, const StageBook& b, float* out);
int nearest_avx512(const float* q, const StageBook& b, float* best_score);
#elif defined(__aarch64__)
void scores_neon(const float* q, const StageBook& b, float* out);
int nearest_neon(const float* q, const StageBook& b, float* best_score);
#endif

// The best functions for this CPU (simd_level()).
ScoresFn scores_fn();
NearestFn nearest_fn();

}  // namespace waste::rvq_detail
