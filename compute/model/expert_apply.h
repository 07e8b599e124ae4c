// A lossless (F32/BF16) routed expert applied to a batch of rows through the trunk matmul
// kernels. VQ3R experts take the RVQ path instead (rvq_experts.h); moe.cpp picks per view.
#pragma once
#include <cstdint>

#include "shared/container/expert_view.h"
#include "shared/model/config.h"

namespace waste {

// y[t] = down( act(gate x[t], up x[t]) ) for t < n; x, y are [n, v.hidden].
void apply_lossless_expert(const ModelConfig& c, const ExpertView& v, const float* x, int64_t n, float* y);

}  // namespace waste
