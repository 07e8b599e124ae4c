// AVX2 paths of attention_kernels.h: 8 lanes per vector, KDA column blocks of 32 (four
// vectors of u and four of o in registers, leaving room for the loaded rows).
#include <immintrin.h>

#include "compute/model/attention_kernels.h"
#include "shared/kernels/vector_ops.h"  // dot_avx2: the project's AVX2 dot, fixed-order reduction

namespace waste::attention_paths {

namespace {

// Columns [c0, c0 + 8 NV) of the KDA step.
template <int NV>
void kda_block(int K, int c0, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
               float* o) {
  __m256 u[NV], acc[NV];
  for (int j = 0; j < NV; ++j) u[j] = _mm256_loadu_ps(v + c0 + 8 * j);
  for (int d = 0; d < K; ++d) {
    float* row = S + int64_t(d) * K + c0;
    const __m256 a = _mm256_set1_ps(alpha[d]), kd = _mm256_set1_ps(k[d]);
    for (int j = 0; j < NV; ++j) {
      const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * j), a);
      _mm256_storeu_ps(row + 8 * j, s);
      u[j] = _mm256_fnmadd_ps(s, kd, u[j]);  // u -= s * k[d]
    }
  }
  for (int j = 0; j < NV; ++j) acc[j] = _mm256_setzero_ps();
  for (int d = 0; d < K; ++d) {
    float* row = S + int64_t(d) * K + c0;
    const __m256 bk = _mm256_set1_ps(beta * k[d]), qd = _mm256_set1_ps(q[d]);
    for (int j = 0; j < NV; ++j) {
      const __m256 s = _mm256_fmadd_ps(bk, u[j], _mm256_loadu_ps(row + 8 * j));
      _mm256_storeu_ps(row + 8 * j, s);
      acc[j] = _mm256_fmadd_ps(s, qd, acc[j]);
    }
  }
  for (int j = 0; j < NV; ++j) _mm256_storeu_ps(o + c0 + 8 * j, acc[j]);
}

}  // namespace

void kda_step_avx2(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                   float* o) {
  int c0 = 0;
  for (; c0 + 32 <= K; c0 += 32) kda_block<4>(K, c0, q, k, v, alpha, beta, S, o);
  for (; c0 + 8 <= K; c0 += 8) kda_block<1>(K, c0, q, k, v, alpha, beta, S, o);
  if (c0 < K) kda_step_columns_scalar(K, c0, K, q, k, v, alpha, beta, S, o);
}

void mla_scores_avx2(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                     float* p, int64_t p_stride) {
  for (int64_t s = 0; s < len; ++s) {
    const float* kr = rows + s * width;
    for (int g = 0; g < G; ++g) p[g * p_stride + s] = dot_avx2(q + g * q_stride, kr, width) * scale;
  }
}

void mla_weighted_sum_avx2(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                           float* o, int64_t o_stride) {
  // Two rows per step: each accumulator load/store in o serves two FMAs.
  int64_t s = 0;
  for (; s + 2 <= len; s += 2) {
    const float* c0 = rows + s * width;
    const float* c1 = c0 + width;
    for (int g = 0; g < G; ++g) {
      const float q0 = p[g * p_stride + s], q1 = p[g * p_stride + s + 1];
      const __m256 p0 = _mm256_set1_ps(q0), p1 = _mm256_set1_ps(q1);
      float* og = o + g * o_stride;
      int i = 0;
      for (; i + 8 <= r; i += 8) {
        __m256 acc = _mm256_fmadd_ps(p0, _mm256_loadu_ps(c0 + i), _mm256_loadu_ps(og + i));
        _mm256_storeu_ps(og + i, _mm256_fmadd_ps(p1, _mm256_loadu_ps(c1 + i), acc));
      }
      for (; i < r; ++i) og[i] = (og[i] + q0 * c0[i]) + q1 * c1[i];
    }
  }
  for (; s < len; ++s) {
    const float* c0 = rows + s * width;
    for (int g = 0; g < G; ++g) {
      const float q0 = p[g * p_stride + s];
      const __m256 p0 = _mm256_set1_ps(q0);
      float* og = o + g * o_stride;
      int i = 0;
      for (; i + 8 <= r; i += 8) _mm256_storeu_ps(og + i, _mm256_fmadd_ps(p0, _mm256_loadu_ps(c0 + i), _mm256_loadu_ps(og + i)));
      for (; i < r; ++i) og[i] += q0 * c0[i];
    }
  }
}

}  // namespace waste::attention_paths
