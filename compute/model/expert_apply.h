// One routed expert applied to a batch of rows, whatever the record format: F32/BF16 views
// go through matvec's kernels; VQ3R needs the RVQ fused apply (not wired yet).
#pragma once
#include <cstdint>

#include "shared/container/expert_view.h"
#include "shared/model/config.h"

namespace waste {

// y[t] = down( act(gate x[t], up x[t]) ) for t < n; x, y are [n, v.hidden].
void apply_expert(const ModelConfig& c, const ExpertView& v, const float* x, int64_t n, float* y);

}  // namespace waste
