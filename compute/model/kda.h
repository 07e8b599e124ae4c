// Kimi Delta Attention (MODELS.md 4.4, A.3): per head an fp32 state S in R^{K x V} decayed
// per key channel, corrected by the delta rule and read by the query. Two forms of the same
// recurrence: token by token (decode, and the reference) and chunked (prefill, kda_chunked.cpp),
// which handles `chunk` tokens at once with dense small matrices.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "compute/model/session.h"
#include "shared/kernels/matvec.h"
#include "shared/model/config.h"

namespace waste {

class ThreadPool;

struct KdaWeights {
  MatrixView q_proj, k_proj, v_proj;                     // [P, D], P = heads * head_dim
  std::span<const float> q_conv, k_conv, v_conv;         // [P, kernel] depthwise causal conv
  MatrixView f_a, f_b;                                   // low-rank forget gate: f = f_b(f_a x)
  std::span<const float> A_log;                          // first `heads` entries used (K3 pads)
  std::span<const float> dt_bias;                        // [P]
  MatrixView b_proj;                                     // [heads, D]: beta = sigmoid(b)
  MatrixView g_a, g_b;                                   // low-rank output gate (Kimi-Linear)
  MatrixView g_proj;                                     // full-rank output gate (K3), else rows == 0
  std::span<const float> o_norm;                         // [head_dim], shared by all heads
  MatrixView o_proj;                                     // [D, P]
};

// Tokens per chunk of the chunked form; 1 = the recurrence. The chunked form matches the
// recurrence to ~1e-6 relative and made KDA's own prefill work ~1.4x faster at Kimi-Linear width
// (16 and 32 alike), but it is not bit-identical: logits differ from token-by-token decode by
// float rounding (K3 fixture: 2.7e-5 absolute on logits of magnitude ~8), and on random
// synthetic weights that rounding can flip a near-tied router choice, so logits would then
// depend on the prefill chunk size. The Model therefore runs the recurrence by default
// (Model::set_kda_chunk, `--kda-chunk 16` on the commands turns the chunked form on); since
// the per-head kernels, KDA is a small share of prefill (the projections dominate).
// 16, because K3's log decay (>= -5 per token) stays inside the range kda_chunked.cpp
// factorises over 16 tokens.
inline constexpr int kKdaPrefillChunk = 16;
// The largest chunk accepted (Model::set_kda_chunk, --kda-chunk): past a prefill chunk's 128
// tokens a chunk never fills, and each head's work buffers grow with its square.
inline constexpr int kMaxKdaChunk = 256;

// Allocates a zeroed state for one KDA layer.
KdaState make_kda_state(const ModelConfig& c);

// A KDA layer in three steps, so a batch of sessions reads each weight matrix once:
//   kda_project(all rows) -> kda_mix(each session on its own rows) -> kda_output(all rows).
// The projections of n rows, token t at row t: q, k, v, the forget-gate pre-activation f and
// the output gate g [n, P]; beta's pre-activation b [n, heads]. kda_mix turns them in place
// into the delta rule's inputs (conv + SiLU, norms, log decay, sigmoid).
struct KdaProjections {
  std::vector<float> q, k, v, f, g, b;
};
void kda_project(const ModelConfig& c, const KdaWeights& w, const float* x, int64_t n, KdaProjections& p);
// One session's tokens, rows [row0, row0 + n) of p in order, through its conv windows and
// state; their gated, normalised head outputs go to rows [row0, row0 + n) of o [rows, P].
// Heads on `pool` (nullptr: the calling thread); each head is computed whole by one thread.
void kda_mix(const ModelConfig& c, const KdaWeights& w, KdaState& s, KdaProjections& p, int64_t row0, int64_t n,
             float* o, int chunk, ThreadPool* pool);
// y [n, D] = o_proj o.
void kda_output(const KdaWeights& w, const float* o, int64_t n, float* y);

// Log of the per-channel decay, a = log(alpha) <= 0, from A = exp(A_log[h]) and
// z = f + dt_bias: Kimi-Linear -exp(A_log) softplus(z); K3 lb * sigmoid(A z) (lb = -5).
float kda_log_decay(const ModelConfig& c, float A, float z);

// One head's delta-rule inputs over n tokens, token t at row t: q and k already
// L2-normalised (q also scaled), a the log decay per key channel, beta in (0, 1).
struct KdaHeadInputs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* log_decay = nullptr;
  int64_t stride = 0;  // between tokens' rows of q, k, v, log_decay (and o)
  const float* beta = nullptr;
  int64_t beta_stride = 0;
};

// Runs n tokens of one head through S [K, K] (key channel major) and writes o_t = S_t^T q_t
// to o[t * in.stride + e]. The recurrent form: per token S <- Diag(alpha) S,
// u = v - S^T k, S <- S + beta k u^T, o = S^T q.
void kda_head_recurrent(int K, int64_t n, const KdaHeadInputs& in, float* S, float* o);
// The same result computed `chunk` tokens at a time (kda_chunked.cpp).
void kda_head_chunked(int K, int64_t n, const KdaHeadInputs& in, int chunk, float* S, float* o);

}  // namespace waste
