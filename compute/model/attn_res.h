// Block Attention Residuals (K3, MODELS.md A.2): instead of one running residual, a layer
// reads a softmax mixture of the stored block sums and the current partial sum, scored by a
// learned direction on their RMS-normalised forms.
#pragma once
#include <cstdint>
#include <span>

namespace waste {

struct AttnResWeights {
  std::span<const float> norm;  // *_res_norm.weight [D]
  std::span<const float> proj;  // *_res_proj.weight [1, D]
};

// out[D] = sum_j alpha_j V_j over V = [blocks..., partial], alpha = softmax_j(score_j),
// score_j = sum_d rmsnorm(V_j)[d] norm[d] proj[d]. out may alias partial.
void attn_res(const float* const* blocks, int n_blocks, const float* partial, const AttnResWeights& w, int D, float eps,
              float* out);

}  // namespace waste
