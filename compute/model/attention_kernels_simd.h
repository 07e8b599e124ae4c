// Internal: the SIMD paths of attention_kernels.h, written once over an instruction set
// `Isa` (shared/kernels/simd_traits.h); attention_kernels_avx2.cpp and _avx512.cpp only
// instantiate them. Include only from those per-ISA files (internal linkage, see
// simd_traits.h). The entry templates are noinline: inlined into their one-line wrapper, GCC 12
// spilled the loop's pointers in mla_weighted_sum (MLA decode 20% slower on AVX-512).
#pragma once
#include <cstdint>

#include "compute/model/attention_kernels.h"
#include "shared/kernels/vector_ops_simd.h"

namespace waste::attention_paths {
namespace {

// Columns [c0, c0 + kLanes NV) of the KDA step.
template <class Isa, int NV>
void kda_block(int K, int c0, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
               float* o) {
  constexpr int L = Isa::kLanes;
  typename Isa::V u[NV], acc[NV];
  for (int j = 0; j < NV; ++j) u[j] = Isa::load(v + c0 + L * j);
  for (int d = 0; d < K; ++d) {
    float* row = S + int64_t(d) * K + c0;
    const auto a = Isa::set1(alpha[d]), kd = Isa::set1(k[d]);
    for (int j = 0; j < NV; ++j) {
      const auto s = Isa::mul(Isa::load(row + L * j), a);
      Isa::store(row + L * j, s);
      u[j] = Isa::fnma(s, kd, u[j]);  // u -= s * k[d]
    }
  }
  for (int j = 0; j < NV; ++j) acc[j] = Isa::zero();
  for (int d = 0; d < K; ++d) {
    float* row = S + int64_t(d) * K + c0;
    const auto bk = Isa::set1(beta * k[d]), qd = Isa::set1(q[d]);
    for (int j = 0; j < NV; ++j) {
      const auto s = Isa::fma(bk, u[j], Isa::load(row + L * j));
      Isa::store(row + L * j, s);
      acc[j] = Isa::fma(s, qd, acc[j]);
    }
  }
  for (int j = 0; j < NV; ++j) Isa::store(o + c0 + L * j, acc[j]);
}

// Column blocks of 4 vectors (four vectors of u and four of o in registers across all K key
// channels, leaving room for the loaded rows), then single vectors, then a scalar tail.
template <class Isa>
[[gnu::noinline]] void kda_step(int K, const float* q, const float* k, const float* v, const float* alpha, float beta,
                                float* S, float* o) {
  constexpr int L = Isa::kLanes;
  int c0 = 0;
  for (; c0 + 4 * L <= K; c0 += 4 * L) kda_block<Isa, 4>(K, c0, q, k, v, alpha, beta, S, o);
  for (; c0 + L <= K; c0 += L) kda_block<Isa, 1>(K, c0, q, k, v, alpha, beta, S, o);
  if (c0 < K) kda_step_columns_scalar(K, c0, K, q, k, v, alpha, beta, S, o);
}

// A cache row's values as f32 vectors: f32 rows load as they are, bf16 rows (the cache of a
// quantized trunk, shared/model/mla_cache.h) widen exactly.
template <class Isa>
typename Isa::V load_row(const float* p) { return Isa::load(p); }
template <class Isa>
typename Isa::V load_row(const uint16_t* p) { return Isa::load_bf16(p); }
template <class Isa>
typename Isa::V load_row_tail(const float* p, int64_t n) { return Isa::load_tail(p, n); }
template <class Isa>
typename Isa::V load_row_tail(const uint16_t* p, int64_t n) { return Isa::load_bf16_tail(p, int(n)); }

// q . row over n values, in simd::dot's order (four accumulators, then a tail).
template <class Isa, class Row>
float dot_row(const float* q, const Row* row, int64_t n) {
  constexpr int L = Isa::kLanes;
  auto acc0 = Isa::zero(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    acc0 = Isa::fma(Isa::load(q + i), load_row<Isa>(row + i), acc0);
    acc1 = Isa::fma(Isa::load(q + i + L), load_row<Isa>(row + i + L), acc1);
    acc2 = Isa::fma(Isa::load(q + i + 2 * L), load_row<Isa>(row + i + 2 * L), acc2);
    acc3 = Isa::fma(Isa::load(q + i + 3 * L), load_row<Isa>(row + i + 3 * L), acc3);
  }
  for (; i + L <= n; i += L) acc0 = Isa::fma(Isa::load(q + i), load_row<Isa>(row + i), acc0);
  if (i < n) acc1 = Isa::fma(Isa::load_tail(q + i, n - i), load_row_tail<Isa>(row + i, n - i), acc1);
  return Isa::sum(Isa::add(Isa::add(acc0, acc1), Isa::add(acc2, acc3)));
}

template <class Isa, class Row>
[[gnu::noinline]] void mla_scores(int G, const float* q, int64_t q_stride, const Row* rows, int64_t len, int width,
                                  float scale, float* p, int64_t p_stride) {
  for (int64_t s = 0; s < len; ++s) {
    const Row* kr = rows + s * width;
    for (int g = 0; g < G; ++g) p[g * p_stride + s] = dot_row<Isa>(q + g * q_stride, kr, width) * scale;
  }
}

template <class Isa, class Row>
[[gnu::noinline]] void mla_weighted_sum(int G, const float* p, int64_t p_stride, const Row* rows, int64_t len,
                                        int width, int r, float* o, int64_t o_stride) {
  constexpr int L = Isa::kLanes;
  // Two rows per step: each accumulator load/store in o serves two FMAs.
  int64_t s = 0;
  for (; s + 2 <= len; s += 2) {
    const Row* c0 = rows + s * width;
    const Row* c1 = c0 + width;
    for (int g = 0; g < G; ++g) {
      const auto p0 = Isa::set1(p[g * p_stride + s]), p1 = Isa::set1(p[g * p_stride + s + 1]);
      float* og = o + g * o_stride;
      int i = 0;
      for (; i + L <= r; i += L) {
        const auto acc = Isa::fma(p0, load_row<Isa>(c0 + i), Isa::load(og + i));
        Isa::store(og + i, Isa::fma(p1, load_row<Isa>(c1 + i), acc));
      }
      // (p re-read rather than kept in a register: fewer spills in the loop above)
      for (; i < r; ++i) og[i] = (og[i] + p[g * p_stride + s] * row_value(c0 + i)) + p[g * p_stride + s + 1] * row_value(c1 + i);
    }
  }
  for (; s < len; ++s) {
    const Row* c0 = rows + s * width;
    for (int g = 0; g < G; ++g) {
      const auto p0 = Isa::set1(p[g * p_stride + s]);
      float* og = o + g * o_stride;
      int i = 0;
      for (; i + L <= r; i += L) Isa::store(og + i, Isa::fma(p0, load_row<Isa>(c0 + i), Isa::load(og + i)));
      for (; i < r; ++i) og[i] += p[g * p_stride + s] * row_value(c0 + i);
    }
  }
}

}  // namespace
}  // namespace waste::attention_paths
