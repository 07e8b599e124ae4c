// The small element-wise pieces of every family, written as MODELS.md writes them.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>

#include "shared/kernels/activation.h"  // sigmoid, silu and the gated MLP activations
#include "shared/kernels/matvec.h"
#include "shared/model/config.h"

namespace waste {

// out = w * (x / sqrt(mean(x^2) + eps)); w may be null (AttnRes keys are normalised
// without a weight). out may alias x.
void rmsnorm(const float* x, const float* w, int n, float eps, float* out);

// x / max(||x||_2, 1e-12), torch's F.normalize, which the Kimi references use for q and k.
void l2_normalize(float* x, int n);

// In-place softmax over n scores, max-subtracted so large scores cannot overflow.
void softmax(float* x, int n);

// The gated activation of a (dense, shared or routed) MLP: out[i] = act(gate[i], up[i]).
// SiLU: silu(g)*u. SiTU (K3): [b tanh(g/b) sigmoid(g)] * [bl tanh(u/bl)].
void gated_activation(const ModelConfig& c, const float* gate, const float* up, int64_t n, float* out);

// Rows [row0, row0 + n) of a stored matrix as a view of their own (per-head pieces of
// kv_b_proj). Throws for formats whose rows cannot be addressed alone.
MatrixView row_slice(const MatrixView& w, int64_t row0, int64_t n);

// y[c] += sum_r x[r] * W[row0 + r][c] over rows r < n, for `tokens` inputs at once:
// x[t * x_stride + r], y[t * y_stride + c]. The transposed product absorbed MLA needs for
// W_UK^T q; each row is dequantised once per block of tokens, whatever the format.
void matvec_transposed_accumulate(const MatrixView& w, int64_t row0, int64_t n, const float* x, int64_t x_stride,
                                  int64_t tokens, float* y, int64_t y_stride);


}  // namespace waste
