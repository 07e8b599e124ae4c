#include "compute/model/mla.h"

#include <algorithm>
#include <vector>

#include "compute/model/ops.h"
#include "shared/util/error.h"

namespace waste {

void mla_forward(const ModelConfig& c, const MlaWeights& w, const Rope& rope, float softmax_scale, MlaCache& cache,
                 int64_t max_ctx, int64_t pos0, const float* x, int64_t n, float* y) {
  const int H = c.n_heads, dn = c.qk_nope, dr = c.qk_rope, dv = c.v_head, r = c.kv_lora_rank;
  const int qk = dn + dr, width = r + dr;
  require(pos0 + n <= max_ctx, "MLA cache: context of " + std::to_string(max_ctx) + " tokens exceeded");

  // Queries q_h = [q^N (dn) | q^R (dr)] per head.
  std::vector<float> q(size_t(n) * H * qk);
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(size_t(n) * c.q_lora_rank);
    matmul(w.q_a, x, n, qa.data());
    for (int64_t t = 0; t < n; ++t)
      rmsnorm(&qa[size_t(t) * c.q_lora_rank], w.q_a_norm.data(), c.q_lora_rank, c.rms_eps, &qa[size_t(t) * c.q_lora_rank]);
    matmul(w.q_b, qa.data(), n, q.data());
  } else {
    matmul(w.q_proj, x, n, q.data());
  }

  // New cache rows [c ; k^R]: the latent is normalised, the rope key rotated (NoPE models
  // keep k^R as is; it still enters the score).
  std::vector<float> kv(size_t(n) * width);
  matmul(w.kv_a, x, n, kv.data());
  cache.width = width;
  cache.rows.resize(size_t(pos0 + n) * width);
  for (int64_t t = 0; t < n; ++t) {
    float* row = &kv[size_t(t) * width];
    rmsnorm(row, w.kv_a_norm.data(), r, c.rms_eps, row);
    if (rope.enabled()) rope.apply(row + r, pos0 + t);
    std::copy(row, row + width, &cache.rows[size_t(pos0 + t) * width]);
    if (rope.enabled())
      for (int h = 0; h < H; ++h) rope.apply(&q[(size_t(t) * H + h) * qk + dn], pos0 + t);
  }

  // Absorbed queries Q_h = [W_UK[h]^T q_h^N ; q_h^R], so a score is one dot product with a
  // cache row: q^N . (W_UK c) = (W_UK^T q^N) . c.
  std::vector<float> qabs(size_t(n) * H * width, 0.0f);
  for (int h = 0; h < H; ++h) {
    matvec_transposed_accumulate(w.kv_b, int64_t(h) * (dn + dv), dn, &q[size_t(h) * qk], int64_t(H) * qk, n,
                                 &qabs[size_t(h) * width], int64_t(H) * width);
    for (int64_t t = 0; t < n; ++t)
      std::copy_n(&q[(size_t(t) * H + h) * qk + dn], dr, &qabs[(size_t(t) * H + h) * width + r]);
  }

  // Causal attention over the cache; the value of token s is its latent c(s), so the
  // head output before W_UV is the probability-weighted latent sum.
  std::vector<float> latent_out(size_t(n) * H * r, 0.0f);
  std::vector<float> p;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t len = pos0 + t + 1;
    p.resize(size_t(len));
    for (int h = 0; h < H; ++h) {
      const float* qh = &qabs[(size_t(t) * H + h) * width];
      for (int64_t s = 0; s < len; ++s) {
        const float* kr = &cache.rows[size_t(s) * width];
        double dot = 0;
        for (int i = 0; i < width; ++i) dot += double(qh[i]) * kr[i];
        p[size_t(s)] = float(dot) * softmax_scale;
      }
      softmax(p.data(), int(len));
      float* o = &latent_out[(size_t(t) * H + h) * r];
      for (int64_t s = 0; s < len; ++s) {
        const float* cs = &cache.rows[size_t(s) * width];
        for (int i = 0; i < r; ++i) o[i] += p[size_t(s)] * cs[i];
      }
    }
  }

  // o_h = W_UV[h] (latent sum), one matmul per head over all n tokens.
  std::vector<float> attn(size_t(n) * H * dv), lat(size_t(n) * r), oh(size_t(n) * dv);
  for (int h = 0; h < H; ++h) {
    for (int64_t t = 0; t < n; ++t) std::copy_n(&latent_out[(size_t(t) * H + h) * r], r, &lat[size_t(t) * r]);
    matmul(row_slice(w.kv_b, int64_t(h) * (dn + dv) + dn, dv), lat.data(), n, oh.data());
    for (int64_t t = 0; t < n; ++t) std::copy_n(&oh[size_t(t) * dv], dv, &attn[(size_t(t) * H + h) * dv]);
  }

  // K3 gates each head output with sigmoid(g_proj x) before W_o (MODELS.md A.4).
  if (w.g_proj.rows > 0) {
    std::vector<float> g(attn.size());
    matmul(w.g_proj, x, n, g.data());
    for (size_t i = 0; i < attn.size(); ++i) attn[i] *= sigmoid(g[i]);
  }
  matmul(w.o_proj, attn.data(), n, y);
}

}  // namespace waste
