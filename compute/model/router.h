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

// x: n normalised hidden rows [n, D]. Writes top_k expert ids per token (in order of
// decreasing biased score) and their final weights (renormalised, times routed_scaling).
void route(const ModelConfig& c, const RouterWeights& w, const float* x, int64_t n, int* experts, float* weights);

// The selection and weighting for one token's raw router logits [experts] (exposed for tests).
void route_scores(const ModelConfig& c, std::span<const float> bias, const float* logits, int* experts, float* weights);

}  // namespace waste
