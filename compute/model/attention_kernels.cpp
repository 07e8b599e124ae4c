// Scalar paths of attention_kernels.h and the run-time dispatch. The scalar loops keep the
// order of operations of the original per-token code (kda.cpp, mla.cpp before vectorising),
// so WASTE_SIMD=scalar reproduces those results bit for bit.
#include "compute/model/attention_kernels.h"


namespace waste {

namespace attention_paths {

void kda_step_columns_scalar(int K, int c0, int c1, const float* q, const float* k, const float* v,
                             const float* alpha, float beta, float* S, float* o) {
  // Per column e, in key channel order d: decay and read (u), then write and read (o).
  for (int e = c0; e < c1; ++e) o[e] = 0.0f;
  float u[64];  // a column block at a time: u stays in registers / L1
  for (int b0 = c0; b0 < c1; b0 += 64) {
    const int b1 = b0 + 64 < c1 ? b0 + 64 : c1;
    for (int e = b0; e < b1; ++e) u[e - b0] = v[e];
    for (int d = 0; d < K; ++d) {
      float* row = S + int64_t(d) * K;
      const float a = alpha[d], kd = k[d];
      for (int e = b0; e < b1; ++e) {
        row[e] *= a;
        u[e - b0] -= row[e] * kd;
      }
    }
    for (int d = 0; d < K; ++d) {
      float* row = S + int64_t(d) * K;
      const float bk = beta * k[d], qd = q[d];
      for (int e = b0; e < b1; ++e) {
        row[e] += bk * u[e - b0];
        o[e] += row[e] * qd;
      }
    }
  }
}

namespace {

template <class Row>
void scores_reference(int G, const float* q, int64_t q_stride, const Row* rows, int64_t len, int width, float scale,
                      float* p, int64_t p_stride) {
  for (int64_t s = 0; s < len; ++s) {
    const Row* kr = rows + s * width;
    for (int g = 0; g < G; ++g) {
      const float* qh = q + g * q_stride;
      double dot = 0;  // the reference sums in double, in index order
      for (int i = 0; i < width; ++i) dot += double(qh[i]) * row_value(kr + i);
      p[g * p_stride + s] = float(dot) * scale;
    }
  }
}

template <class Row>
void weighted_sum_reference(int G, const float* p, int64_t p_stride, const Row* rows, int64_t len, int width, int r,
                            float* o, int64_t o_stride) {
  for (int64_t s = 0; s < len; ++s) {
    const Row* cs = rows + s * width;
    for (int g = 0; g < G; ++g) {
      const float ps = p[g * p_stride + s];
      float* og = o + g * o_stride;
      for (int i = 0; i < r; ++i) og[i] += ps * row_value(cs + i);
    }
  }
}

}  // namespace

void mla_scores_scalar(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                       float* p, int64_t p_stride) {
  scores_reference(G, q, q_stride, rows, len, width, scale, p, p_stride);
}
void mla_scores_scalar(int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                       float scale, float* p, int64_t p_stride) {
  scores_reference(G, q, q_stride, rows, len, width, scale, p, p_stride);
}
void mla_weighted_sum_scalar(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                             float* o, int64_t o_stride) {
  weighted_sum_reference(G, p, p_stride, rows, len, width, r, o, o_stride);
}
void mla_weighted_sum_scalar(int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len, int width,
                             int r, float* o, int64_t o_stride) {
  weighted_sum_reference(G, p, p_stride, rows, len, width, r, o, o_stride);
}

}  // namespace attention_paths

using namespace attention_paths;

// Each architecture builds only its own SIMD sources; a level of another chain never occurs.
void kda_step(SimdLevel level, int K, const float* q, const float* k, const float* v, const float* alpha, float beta,
              float* S, float* o) {
#if defined(__x86_64__)
  if (level == SimdLevel::Avx512) return kda_step_avx512(K, q, k, v, alpha, beta, S, o);
  if (level == SimdLevel::Avx2) return kda_step_avx2(K, q, k, v, alpha, beta, S, o);
#elif defined(__aarch64__)
  if (level == SimdLevel::Neon) return kda_step_neon(K, q, k, v, alpha, beta, S, o);
#endif
  kda_step_columns_scalar(K, 0, K, q, k, v, alpha, beta, S, o);
}

namespace {

// One dispatch for both row types (f32, bf16): the path of the level, the scalar reference else.
template <class Row>
void scores_at(SimdLevel level, int G, const float* q, int64_t q_stride, const Row* rows, int64_t len, int width,
               float scale, float* p, int64_t p_stride) {
#if defined(__x86_64__)
  if (level == SimdLevel::Avx512) return mla_scores_avx512(G, q, q_stride, rows, len, width, scale, p, p_stride);
  if (level == SimdLevel::Avx2) return mla_scores_avx2(G, q, q_stride, rows, len, width, scale, p, p_stride);
#elif defined(__aarch64__)
  if (level == SimdLevel::Neon) return mla_scores_neon(G, q, q_stride, rows, len, width, scale, p, p_stride);
#endif
  mla_scores_scalar(G, q, q_stride, rows, len, width, scale, p, p_stride);
}

template <class Row>
void weighted_sum_at(SimdLevel level, int G, const float* p, int64_t p_stride, const Row* rows, int64_t len, int width,
                     int r, float* o, int64_t o_stride) {
#if defined(__x86_64__)
  if (level == SimdLevel::Avx512) return mla_weighted_sum_avx512(G, p, p_stride, rows, len, width, r, o, o_stride);
  if (level == SimdLevel::Avx2) return mla_weighted_sum_avx2(G, p, p_stride, rows, len, width, r, o, o_stride);
#elif defined(__aarch64__)
  if (level == SimdLevel::Neon) return mla_weighted_sum_neon(G, p, p_stride, rows, len, width, r, o, o_stride);
#endif
  mla_weighted_sum_scalar(G, p, p_stride, rows, len, width, r, o, o_stride);
}

}  // namespace

void mla_scores(SimdLevel level, int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width,
                float scale, float* p, int64_t p_stride) {
  scores_at(level, G, q, q_stride, rows, len, width, scale, p, p_stride);
}
void mla_scores(SimdLevel level, int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                float scale, float* p, int64_t p_stride) {
  scores_at(level, G, q, q_stride, rows, len, width, scale, p, p_stride);
}
void mla_weighted_sum(SimdLevel level, int G, const float* p, int64_t p_stride, const float* rows, int64_t len,
                      int width, int r, float* o, int64_t o_stride) {
  weighted_sum_at(level, G, p, p_stride, rows, len, width, r, o, o_stride);
}
void mla_weighted_sum(SimdLevel level, int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len,
                      int width, int r, float* o, int64_t o_stride) {
  weighted_sum_at(level, G, p, p_stride, rows, len, width, r, o, o_stride);
}

}  // namespace waste
