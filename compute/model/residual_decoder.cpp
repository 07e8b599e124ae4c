// DeepSeek-V3 / Kimi K2 and Kimi-Linear: the standard pre-norm decoder (MODELS.md 1.3, 4.5).
//   h += Attn(RMSNorm(h)) ; h += FFN(RMSNorm(h))
// The families differ only inside the sublayers (MLA with YaRN rope everywhere vs KDA with
// NoPE MLA every few layers), which attention() picks per layer. In a batched forward the
// rows of several sessions share the stream: attention runs per session on its rows, the
// norms and the feed-forward block on every row at once (each row on its own).
#include <algorithm>
#include <vector>

#include "compute/model/model.h"
#include "compute/model/ops.h"

namespace waste {

void Model::run_residual_decoder(std::span<const SessionRows> parts, float* h, int64_t n,
                                 std::vector<float>* layer_hidden) const {
  const int D = config_.hidden;
  const size_t size = size_t(n) * D;
  std::vector<float> normed(size), out(size);
  for (int L = 0; L < config_.n_layers; ++L) {
    const Layer& l = layers_[size_t(L)];
    for (int64_t t = 0; t < n; ++t) rmsnorm(h + t * D, l.input_norm.data(), D, config_.rms_eps, &normed[size_t(t) * D]);
    attention_rows(L, parts, normed.data(), out.data());
    for (size_t i = 0; i < size; ++i) h[i] += out[i];

    for (int64_t t = 0; t < n; ++t) rmsnorm(h + t * D, l.post_norm.data(), D, config_.rms_eps, &normed[size_t(t) * D]);
    feed_forward(L, normed.data(), n, out.data());
    for (size_t i = 0; i < size; ++i) h[i] += out[i];
    prefetch_next(L, h, n);

    if (layer_hidden) std::copy(h, h + size, layer_hidden->begin() + ptrdiff_t(size_t(L) * size));
  }
}

}  // namespace waste
