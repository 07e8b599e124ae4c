// The sigmoid MoE router of every family (MODELS.md 3): the correction bias only chooses,
// the unbiased scores weigh; grouped top-k (DeepSeek-V3) keeps the best groups first.
#pragma once
#include <cstdint>
#include <span>

#include "shared/kernels/matvec.h"
#include "shared/model/config.h"

namespace waste {

struct RouterWeights {
  MatrixView gate;              // [experts, D]
  std::span<const float> bias;  // e_score_correction_bias [experts]
};

// The few numbers of the config the router reads. Its own struct so that a caller routing with
// another top_k (the lookahead's guess) changes a copy of these, not of the whole config.
struct RouterParams {
  int n_experts = 0, top_k = 0;
  int n_group = 1, topk_group = 1;  // grouped top-k; a no-op at n_group 1
  bool renormalize = true;          // norm_topk_prob
  float routed_scaling = 1.0f;

  static RouterParams of(const ModelConfig& c) {
    return {c.n_experts, c.top_k, c.n_group, c.topk_group, c.renormalize, c.routed_scaling};
  }
};

// x: n normalised hidden rows [n, D]. Writes top_k expert ids per token (in order of
// decreasing biased score) and their final weights (renormalised, times routed_scaling).
void route(const RouterParams& p, const RouterWeights& w, const float* x, int64_t n, int* experts, float* weights);

// The selection and weighting for one token's raw router logits [experts] (exposed for tests).
void route_scores(const RouterParams& p, std::span<const float> bias, const float* logits, int* experts,
                  float* weights);

}  // namespace waste
