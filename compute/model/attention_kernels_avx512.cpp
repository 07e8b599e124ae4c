// AVX-512 paths of attention_kernels.h: 16 lanes per vector, KDA column blocks of 64 (four
// vectors of u and four of o stay in registers across all K key channels).
#include <immintrin.h>

#include "compute/model/attention_kernels.h"

namespace waste::attention_paths {

namespace {

// Columns [c0, c0 + 16 NV) of the KDA step.
template <int NV>
void kda_block(int K, int c0, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
               float* o) {
  __m512 u[NV], acc[NV];
  for (int j = 0; j < NV; ++j) u[j] = _mm512_loadu_ps(v + c0 + 16 * j);
  for (int d = 0; d < K; ++d) {
    float* row = S + int64_t(d) * K + c0;
    const __m512 a = _mm512_set1_ps(alpha[d]), kd = _mm512_set1_ps(k[d]);
    for (int j = 0; j < NV; ++j) {
      const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * j), a);
      _mm512_storeu_ps(row + 16 * j, s);
      u[j] = _mm512_fnmadd_ps(s, kd, u[j]);  // u -= s * k[d]
    }
  }
  for (int j = 0; j < NV; ++j) acc[j] = _mm512_setzero_ps();
  for (int d = 0; d < K; ++d) {
    float* row = S + int64_t(d) * K + c0;
    const __m512 bk = _mm512_set1_ps(beta * k[d]), qd = _mm512_set1_ps(q[d]);
    for (int j = 0; j < NV; ++j) {
      const __m512 s = _mm512_fmadd_ps(bk, u[j], _mm512_loadu_ps(row + 16 * j));
      _mm512_storeu_ps(row + 16 * j, s);
      acc[j] = _mm512_fmadd_ps(s, qd, acc[j]);
    }
  }
  for (int j = 0; j < NV; ++j) _mm512_storeu_ps(o + c0 + 16 * j, acc[j]);
}

// 16 x 4 partial sums, then a fixed-order reduction (the result does not depend on the thread).
float dot512(const float* a, const float* b, int n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
  }
  for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

}  // namespace

void kda_step_avx512(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                     float* o) {
  int c0 = 0;
  for (; c0 + 64 <= K; c0 += 64) kda_block<4>(K, c0, q, k, v, alpha, beta, S, o);
  for (; c0 + 16 <= K; c0 += 16) kda_block<1>(K, c0, q, k, v, alpha, beta, S, o);
  if (c0 < K) kda_step_columns_scalar(K, c0, K, q, k, v, alpha, beta, S, o);
}

void mla_scores_avx512(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                       float* p, int64_t p_stride) {
  for (int64_t s = 0; s < len; ++s) {
    const float* kr = rows + s * width;
    for (int g = 0; g < G; ++g) p[g * p_stride + s] = dot512(q + g * q_stride, kr, width) * scale;
  }
}

void mla_weighted_sum_avx512(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                             float* o, int64_t o_stride) {
  // Two rows per step: each accumulator load/store in o serves two FMAs.
  int64_t s = 0;
  for (; s + 2 <= len; s += 2) {
    const float* c0 = rows + s * width;
    const float* c1 = c0 + width;
    for (int g = 0; g < G; ++g) {
      const __m512 p0 = _mm512_set1_ps(p[g * p_stride + s]), p1 = _mm512_set1_ps(p[g * p_stride + s + 1]);
      float* og = o + g * o_stride;
      int i = 0;
      for (; i + 16 <= r; i += 16) {
        __m512 acc = _mm512_fmadd_ps(p0, _mm512_loadu_ps(c0 + i), _mm512_loadu_ps(og + i));
        _mm512_storeu_ps(og + i, _mm512_fmadd_ps(p1, _mm512_loadu_ps(c1 + i), acc));
      }
      for (; i < r; ++i) og[i] = (og[i] + p[g * p_stride + s] * c0[i]) + p[g * p_stride + s + 1] * c1[i];
    }
  }
  for (; s < len; ++s) {
    const float* c0 = rows + s * width;
    for (int g = 0; g < G; ++g) {
      const __m512 p0 = _mm512_set1_ps(p[g * p_stride + s]);
      float* og = o + g * o_stride;
      int i = 0;
      for (; i + 16 <= r; i += 16) _mm512_storeu_ps(og + i, _mm512_fmadd_ps(p0, _mm512_loadu_ps(c0 + i), _mm512_loadu_ps(og + i)));
      for (; i < r; ++i) og[i] += p[g * p_stride + s] * c0[i];
    }
  }
}

}  // namespace waste::attention_paths
