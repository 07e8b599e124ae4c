// The inner loops of attention at decode (and MLA prefill): the KDA delta-rule step of one
// head, and MLA scores / weighted latent sums over the cache. Each has a portable scalar path
// (the reference: the order of operations of the original per-token loops) and AVX2 /
// AVX-512 (x86) or NEON (aarch64) paths chosen at run time; the SIMD paths differ from scalar only by float
// reordering and fused multiply-adds. Threading is the caller's (kda.cpp, mla.cpp): every
// function here works on its own heads only, so a split over threads never changes a bit.
#pragma once
#include <cstdint>

#include "shared/util/cpu.h"
#include "shared/util/half.h"

namespace waste {

// One token through one KDA head (MODELS.md 4.4): S [K][K] key channel major,
//   S <- Diag(alpha) S ; u = v - S^T k ; S <- S + beta k u^T ; o = S^T q.
// alpha = e^{log decay} per key channel. Each column e of S is independent of the others,
// so the work is done one block of columns at a time, both passes while the block is in L1.
void kda_step(SimdLevel level, int K, const float* q, const float* k, const float* v, const float* alpha, float beta,
              float* S, float* o);
inline void kda_step(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                     float* o) {
  kda_step(simd_level(), K, q, k, v, alpha, beta, S, o);
}

// MLA scores of G heads against `len` cache rows of `width` floats:
//   p[g * p_stride + s] = scale * (q_g . row_s),  q_g = q + g * q_stride.
// Each row is read once for all G heads.
void mla_scores(SimdLevel level, int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width,
                float scale, float* p, int64_t p_stride);
// o[g * o_stride + i] += sum_s p[g * p_stride + s] * row_s[i] for i < r (the latent part of the
// row), s in ascending order.
void mla_weighted_sum(SimdLevel level, int G, const float* p, int64_t p_stride, const float* rows, int64_t len,
                      int width, int r, float* o, int64_t o_stride);
// The same two over a bf16 cache (shared/model/mla_cache.h): each value widened exactly to f32,
// then the f32 path's arithmetic in its order.
void mla_scores(SimdLevel level, int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                float scale, float* p, int64_t p_stride);
void mla_weighted_sum(SimdLevel level, int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len,
                      int width, int r, float* o, int64_t o_stride);

// The per-path entry points (attention_kernels*.cpp); the dispatchers above choose one.
namespace attention_paths {
// One cached value as f32: f32 as it is, bf16 widened exactly (the scalar paths and the SIMD
// paths' tails share it).
inline float row_value(const float* p) { return *p; }
inline float row_value(const uint16_t* p) { return bf16_to_f32(*p); }
// Columns [c0, c1) of kda_step in the scalar order; the SIMD paths use it for a tail of
// fewer columns than a vector holds.
void kda_step_columns_scalar(int K, int c0, int c1, const float* q, const float* k, const float* v,
                             const float* alpha, float beta, float* S, float* o);
void kda_step_avx2(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                   float* o);
void kda_step_avx512(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                     float* o);
void mla_scores_scalar(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                       float* p, int64_t p_stride);
void mla_scores_avx2(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                     float* p, int64_t p_stride);
void mla_scores_avx512(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                       float* p, int64_t p_stride);
void mla_weighted_sum_scalar(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                             float* o, int64_t o_stride);
void mla_weighted_sum_avx2(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                           float* o, int64_t o_stride);
void mla_weighted_sum_avx512(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                             float* o, int64_t o_stride);
void kda_step_neon(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                   float* o);
void mla_scores_neon(int G, const float* q, int64_t q_stride, const float* rows, int64_t len, int width, float scale,
                     float* p, int64_t p_stride);
void mla_weighted_sum_neon(int G, const float* p, int64_t p_stride, const float* rows, int64_t len, int width, int r,
                           float* o, int64_t o_stride);
// bf16 cache rows.
void mla_scores_scalar(int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                     float scale, float* p, int64_t p_stride);
void mla_weighted_sum_scalar(int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len, int width,
                           int r, float* o, int64_t o_stride);
void mla_scores_avx2(int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                     float scale, float* p, int64_t p_stride);
void mla_weighted_sum_avx2(int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len, int width,
                           int r, float* o, int64_t o_stride);
void mla_scores_avx512(int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                     float scale, float* p, int64_t p_stride);
void mla_weighted_sum_avx512(int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len, int width,
                           int r, float* o, int64_t o_stride);
void mla_scores_neon(int G, const float* q, int64_t q_stride, const uint16_t* rows, int64_t len, int width,
                     float scale, float* p, int64_t p_stride);
void mla_weighted_sum_neon(int G, const float* p, int64_t p_stride, const uint16_t* rows, int64_t len, int width,
                           int r, float* o, int64_t o_stride);
}  // namespace attention_paths

}  // namespace waste
