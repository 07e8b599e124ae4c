// Multi-head latent attention, absorbed form (MODELS.md 2.1-2.4, 4.3, A.4): the cache holds
// only the normalised latent c and the shared rope key k^R; W_UK is folded into the query
// and W_UV applied after the attention-weighted latent sum.
#pragma once
#include <cstdint>
#include <span>

#include "compute/model/rope.h"
#include "compute/model/session.h"
#include "shared/kernels/matvec.h"
#include "shared/model/config.h"

namespace waste {

class ThreadPool;

struct MlaWeights {
  MatrixView q_a, q_b;             // q LoRA (K2, K3): q = q_b(RMSNorm(q_a x))
  std::span<const float> q_a_norm;
  MatrixView q_proj;               // no q LoRA (Kimi-Linear): q = q_proj x
  MatrixView kv_a;                 // [kv_lora + rope, D]
  std::span<const float> kv_a_norm;
  MatrixView kv_b;                 // [H (nope + v), kv_lora]: per head [W_UK ; W_UV]
  MatrixView g_proj;               // K3 output gate, else rows == 0
  MatrixView o_proj;               // [D, H v]
};

// x: n tokens of normalised hidden [n, D] at positions pos0..pos0+n-1; appends their latents
// to `cache` (bounded by max_ctx) and writes the attention output [n, D] to y.
// Heads are spread over the global thread pool (not from inside a parallel_for body).
void mla_forward(const ModelConfig& c, const MlaWeights& w, const Rope& rope, float softmax_scale, MlaCache& cache,
                 int64_t max_ctx, int64_t pos0, const float* x, int64_t n, float* y);
// The same with the heads on `pool` (nullptr: the calling thread alone; tests, benchmarks).
// The result does not depend on the pool: each head is computed whole by one thread.
void mla_forward(const ModelConfig& c, const MlaWeights& w, const Rope& rope, float softmax_scale, MlaCache& cache,
                 int64_t max_ctx, int64_t pos0, const float* x, int64_t n, float* y, ThreadPool* pool);

}  // namespace waste
