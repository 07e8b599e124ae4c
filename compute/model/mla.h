// Multi-head latent attention, absorbed form (MODELS.md 2.1-2.4, 4.3, A.4): the cache holds
// only the normalised latent c and the shared rope key k^R; W_UK is folded into the query
// and W_UV applied after the attention-weighted latent sum.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

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

// An MLA layer in three steps, so a batch of sessions reads each weight matrix once:
//   mla_project(all rows) -> mla_attend(each session on its own rows) -> mla_output(all rows).
// One token goes through MODELS.md 2.1-2.3 in that order: mla_project makes q, [c ; k^R] and
// (K3) the gate, then absorbs W_UK into the query; mla_attend normalises and rotates the new
// cache rows, scores, softmaxes and sums the latents; mla_output applies W_UV, the gate, W_o.
// Per row t of the batch: the queries q [n, H (nope + rope)] (q LoRA normalised, no rope yet),
// the new cache rows' pre-norm [c ; k^R] kv [n, kv_lora + rope], K3's output gate
// pre-activation [n, H v] (empty without one), the absorbed queries qabs [n, H, kv_lora + rope]
// (W_UK^T q^N from mla_project, the rotated q^R from mla_attend) and the heads' attention-
// weighted latent sums [n, H, kv_lora] (zeroed by mla_project, summed by mla_attend).
struct MlaProjections {
  std::vector<float> q, kv, gate, qabs, latent;
};
// Heads on `pool` (nullptr: the calling thread); each head is computed whole by one thread,
// so no result depends on the pool.
void mla_project(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n, MlaProjections& p,
                 ThreadPool* pool);
// One session's tokens, rows [row0, row0 + n) of p at positions pos0..pos0+n-1: appends their
// latents to `cache` (bounded by max_ctx) and writes those rows of p.qabs (rope half) and
// p.latent.
void mla_attend(const ModelConfig& c, const MlaWeights& w, const Rope& rope, float softmax_scale, MlaCache& cache,
                int64_t max_ctx, int64_t pos0, MlaProjections& p, int64_t row0, int64_t n, ThreadPool* pool);
// y [n, D] = o_proj (W_UV latent per head, gated by sigmoid(gate) when the layer has one).
void mla_output(const ModelConfig& c, const MlaWeights& w, const MlaProjections& p, int64_t n, float* y,
                ThreadPool* pool);

}  // namespace waste
