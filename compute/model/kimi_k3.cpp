// Kimi K3: KDA + gated NoPE-MLA layers wired with Block Attention Residuals (MODELS.md A.2).
// Each sublayer reads a learned softmax mixture of the completed block sums and the current
// partial sum instead of the plain residual; every attn_res_block layers the partial sum is
// stored as a block and a new one starts from the next attention output. The block sums live
// only for one forward and are kept per row, so in a batched forward each session's rows mix
// only their own blocks; attention runs per session on its rows.
#include <algorithm>
#include <vector>

#include "compute/model/model.h"
#include "compute/model/ops.h"

namespace waste {

namespace {

// out[t] = AttnRes over (blocks[.][t], partial[t]) for each of n tokens.
void attn_res_rows(const std::vector<std::vector<float>>& blocks, const float* partial, const AttnResWeights& w,
                   int64_t n, int D, float eps, float* out) {
  std::vector<const float*> b(blocks.size());
  for (int64_t t = 0; t < n; ++t) {
    for (size_t j = 0; j < blocks.size(); ++j) b[j] = &blocks[j][size_t(t) * D];
    attn_res(b.data(), int(b.size()), partial + t * D, w, D, eps, out + t * D);
  }
}

}  // namespace

void Model::run_k3_decoder(std::span<const SessionRows> parts, float* h, int64_t n,
                           std::vector<float>* layer_hidden) const {
  const int D = config_.hidden;
  const float eps = config_.rms_eps;
  const size_t size = size_t(n) * D;
  std::vector<std::vector<float>> blocks;  // completed block sums (the embedding is the first)
  std::vector<float> prefix(h, h + size), mixed(size), normed(size), out(size);
  for (int L = 0; L < config_.n_layers; ++L) {
    const Layer& l = layers_[size_t(L)];
    // Attention input: the mixture, except before any block exists (layer 0 reads h itself).
    if (blocks.empty())
      mixed = prefix;
    else
      attn_res_rows(blocks, prefix.data(), l.attn_res, n, D, eps, mixed.data());
    const bool boundary = L % config_.attn_res_block == 0;
    if (boundary) blocks.push_back(prefix);  // the completed block; the next one starts empty

    for (int64_t t = 0; t < n; ++t) rmsnorm(&mixed[size_t(t) * D], l.input_norm.data(), D, eps, &normed[size_t(t) * D]);
    attention_rows(L, parts, normed.data(), out.data());
    if (boundary)
      prefix = out;
    else
      for (size_t i = 0; i < size; ++i) prefix[i] += out[i];

    attn_res_rows(blocks, prefix.data(), l.mlp_res, n, D, eps, mixed.data());
    for (int64_t t = 0; t < n; ++t) rmsnorm(&mixed[size_t(t) * D], l.post_norm.data(), D, eps, &normed[size_t(t) * D]);
    feed_forward(L, normed.data(), n, out.data());
    for (size_t i = 0; i < size; ++i) prefix[i] += out[i];
    prefetch_next(L, prefix.data(), n);

    if (layer_hidden) std::copy(prefix.begin(), prefix.end(), layer_hidden->begin() + ptrdiff_t(size_t(L) * size));
  }
  attn_res_rows(blocks, prefix.data(), output_res_, n, D, eps, h);
}

}  // namespace waste
