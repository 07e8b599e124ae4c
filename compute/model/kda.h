// Kimi Delta Attention, the recurrent form (MODELS.md 4.4, A.3): per head an fp32 state
// S in R^{K x V} decayed per key channel, corrected by the delta rule and read by the query.
// Runs token by token; the chunked prefill form gives the same result and can replace the
// inner loop later.
#pragma once
#include <cstdint>
#include <span>

#include "compute/model/session.h"
#include "shared/kernels/matvec.h"
#include "shared/model/config.h"

namespace waste {

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

// Allocates a zeroed state for one KDA layer.
KdaState make_kda_state(const ModelConfig& c);

// x: n normalised hidden rows [n, D], consumed in order; updates `s`; y gets [n, D].
void kda_forward(const ModelConfig& c, const KdaWeights& w, KdaState& s, const float* x, int64_t n, float* y);

}  // namespace waste
