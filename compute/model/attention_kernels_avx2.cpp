// AVX2 paths of attention_kernels.h: 8 lanes per vector, KDA column blocks of 32.
// The algorithm, shared by every ISA: attention_kernels_simd.h.
#include "compute/model/attention_kernels_simd.h"
#include "shared/kernels/simd_traits.h"

namespace waste::attention_paths {

void kda_step_avx2(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                   float* o) {
  kda_step<simd::Avx2>(K, q, k, v, alpha, beta, S, o);
}

void mla_scores_avx2(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                     float* p, int64_t p_stride) {
  mla_scores<simd::Avx2>(G, q, q_stride, rows, len, width, scale, p, p_stride);
}

void mla_weighted_sum_avx2(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                           float* o, int64_t o_stride) {
  mla_weighted_sum<simd::Avx2>(G, p, p_stride, rows, len, width, r, o, o_stride);
}

void mla_scores_avx2(int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                       float scale, float* p, int64_t p_stride) {
  mla_scores<simd::Avx2>(G, q, q_stride, rows, len, width, scale, p, p_stride);
}

void mla_weighted_sum_avx2(int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len, int width,
                             int r, float* o, int64_t o_stride) {
  mla_weighted_sum<simd::Avx2>(G, p, p_stride, rows, len, width, r, o, o_stride);
}

}  // namespace waste::attention_paths
