#include "compute/model/mla.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "compute/model/attention_kernels.h"
#include "compute/model/ops.h"
#include "shared/kernels/elementwise.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/thread_pool.h"
#include "shared/util/error.h"
#include "shared/util/half.h"

namespace waste {

namespace {

// Below this much attention work (heads x tokens x (context + latent) x row width) a hand-off
// to the pool costs more than it saves (tiny test models, the first tokens).
constexpr int64_t kParallelMinWork = int64_t(1) << 18;
// At most this many heads share one pass over the cache: their queries, scores' rows and
// latent sums stay in L1/L2 while a cache row is used for all of them.
constexpr int kMaxHeadGroup = 16;

// body(i) for i in [0, items), on the pool when `threaded` (each item writes only its own
// rows, so the split never changes a result; the bodies run without a pool of their own:
// parallel_for is not reentrant).
void for_items(ThreadPool* pool, bool threaded, size_t items, const std::function<void(size_t)>& body) {
  if (!threaded) {
    for (size_t i = 0; i < items; ++i) body(i);
    return;
  }
  pool->parallel_for(items, 1, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) body(i);
  });
}

bool heads_threaded(ThreadPool* pool, int64_t heads, int64_t work) {
  return pool && pool->size() > 1 && heads > 1 && work >= kParallelMinWork;
}

// kv_b split per head (MODELS.md 2.2): head h's rows are [W_UK[h] (d_n rows) ; W_UV[h] (d_v rows)].
int64_t w_uk_first_row(const ModelConfig& c, int64_t h) { return h * (c.qk_nope + c.v_head); }
MatrixView w_uv(const ModelConfig& c, const MlaWeights& w, int64_t h) {
  return row_slice(w.kv_b, w_uk_first_row(c, h) + c.qk_nope, c.v_head);
}

// q~_h = W_UK[h]^T q_h^N (MODELS.md 2.3), into the first kv_lora dims of each row of p.qabs:
// a score is then one dot product with a cache row, q^N . (W_UK c) = (W_UK^T q^N) . c. Done
// for every row of the batch at once, so each W_UK row is expanded once per step rather than
// once per session.
void absorb_w_uk(const ModelConfig& c, const MlaWeights& w, int64_t n, MlaProjections& p, ThreadPool* pool) {
  const int64_t H = c.n_heads, dn = c.qk_nope, qk = c.qk_nope + c.qk_rope, r = c.kv_lora_rank;
  const int64_t width = r + c.qk_rope;
  for_items(pool, heads_threaded(pool, H, H * n * dn * r), size_t(H), [&](size_t hh) {
    const int64_t h = int64_t(hh);
    matvec_transposed_accumulate(w.kv_b, w_uk_first_row(c, h), dn, &p.q[size_t(h * qk)], H * qk, n,
                                 &p.qabs[size_t(h * width)], H * width);
  });
}

// The session's new cache rows [c ; k^R] (MODELS.md 2.1): the latent normalised, the rope key
// rotated to its position (NoPE models keep k^R as is; it still enters the score). The rope
// half of each absorbed query is q^R, rotated the same way. kv, q, qabs: this session's rows.
void append_cache_rows(const ModelConfig& c, const MlaWeights& w, const Rope& rope, MlaCache& cache, int64_t pos0,
                       int64_t n, float* kv, float* q, float* qabs) {
  const int H = c.n_heads, dn = c.qk_nope, dr = c.qk_rope, r = c.kv_lora_rank;
  const int qk = dn + dr, width = r + dr;
  cache.width = width;
  const bool bf16 = cache.format == MlaCacheFormat::BF16;
  if (bf16)
    cache.rows_bf16.resize(size_t(pos0 + n) * width);
  else
    cache.rows.resize(size_t(pos0 + n) * width);
  for (int64_t t = 0; t < n; ++t) {
    float* row = kv + t * width;
    rmsnorm(row, w.kv_a_norm.data(), r, c.rms_eps, row);
    if (rope.enabled()) rope.apply(row + r, pos0 + t);
    if (bf16)
      std::transform(row, row + width, &cache.rows_bf16[size_t(pos0 + t) * width], f32_to_bf16);
    else
      std::copy(row, row + width, &cache.rows[size_t(pos0 + t) * width]);
    for (int h = 0; h < H; ++h) {
      float* qr = q + (t * H + h) * qk + dn;
      if (rope.enabled()) rope.apply(qr, pos0 + t);
      std::copy_n(qr, dr, qabs + (t * H + h) * width + r);
    }
  }
}

// o_h = W_UV[h] o-bar_h (MODELS.md 2.3), one matmul per head over all n rows of the batch
// (without a pool: the heads are the parallel loop; same per-row sums as matmul on any pool).
// latent: [n, H, kv_lora]; o: [n, H, v_head].
void apply_w_uv(const ModelConfig& c, const MlaWeights& w, const float* latent, int64_t n, float* o, ThreadPool* pool) {
  const int H = c.n_heads, dv = c.v_head, r = c.kv_lora_rank;
  const KernelPath path = best_kernel_path();
  for_items(pool, heads_threaded(pool, H, int64_t(H) * n * dv * r), size_t(H), [&](size_t hh) {
    const int h = int(hh);
    std::vector<float> lat(size_t(n) * r), oh(size_t(n) * dv);
    for (int64_t t = 0; t < n; ++t) std::copy_n(&latent[(size_t(t) * H + h) * r], r, &lat[size_t(t) * r]);
    matmul_path(path, w_uv(c, w, h), lat.data(), n, oh.data(), nullptr);
    for (int64_t t = 0; t < n; ++t) std::copy_n(&oh[size_t(t) * dv], dv, &o[(size_t(t) * H + h) * dv]);
  });
}

}  // namespace

void mla_project(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n, MlaProjections& p,
                 ThreadPool* pool) {
  const int64_t H = c.n_heads, qk = c.qk_nope + c.qk_rope, ra = c.q_lora_rank;
  // Queries q_h = [q^N (dn) | q^R (dr)] per head: q = W_qb RMSNorm(W_qa x), or q_proj x.
  p.q.resize(size_t(n * H * qk));
  if (ra > 0) {
    std::vector<float> qa(size_t(n * ra));
    matmul(w.q_a, x, n, qa.data());
    for (int64_t t = 0; t < n; ++t) rmsnorm(&qa[size_t(t * ra)], w.q_a_norm.data(), int(ra), c.rms_eps, &qa[size_t(t * ra)]);
    matmul(w.q_b, qa.data(), n, p.q.data());
  } else {
    matmul(w.q_proj, x, n, p.q.data());
  }
  // [c_raw ; kR_raw] = W_kva x (normalised and rotated by mla_attend, once positions are known).
  p.kv.resize(size_t(n) * (c.kv_lora_rank + c.qk_rope));
  matmul(w.kv_a, x, n, p.kv.data());
  // K3's output gate pre-activation g_proj x (MODELS.md A.4).
  p.gate.clear();
  if (w.g_proj.rows > 0) {
    p.gate.resize(size_t(n * H * c.v_head));
    matmul(w.g_proj, x, n, p.gate.data());
  }

  // Absorbed queries Q_h = [W_UK^T q^N ; q^R]: the nope part here, the rope part by mla_attend.
  p.qabs.assign(size_t(n * H * (c.kv_lora_rank + c.qk_rope)), 0.0f);
  p.latent.assign(size_t(n * H * c.kv_lora_rank), 0.0f);  // summed into by mla_attend, session by session
  absorb_w_uk(c, w, n, p, pool);
}

void mla_attend(const ModelConfig& c, const MlaWeights& w, const Rope& rope, float softmax_scale, MlaCache& cache,
                int64_t max_ctx, int64_t pos0, MlaProjections& p, int64_t row0, int64_t n, ThreadPool* pool) {
  const int H = c.n_heads, dn = c.qk_nope, dr = c.qk_rope, r = c.kv_lora_rank;
  const int qk = dn + dr, width = r + dr;
  require(pos0 + n <= max_ctx, "MLA cache: context of " + std::to_string(max_ctx) + " tokens exceeded");
  // This session's rows: token t of it at row t of q, kv, qabs and latent.
  float* q = &p.q[size_t(row0) * H * qk];
  float* kv = &p.kv[size_t(row0) * width];
  float* qabs = &p.qabs[size_t(row0) * H * width];
  float* latent_out = &p.latent[size_t(row0) * H * r];
  append_cache_rows(c, w, rope, cache, pos0, n, kv, q, qabs);

  // Causal attention over the cache (MODELS.md 2.3): s_h(t) = tau Q_h . [c(t) ; k^R(t)],
  // p_h = softmax(s_h), and since the value of token t is its latent c(t), the head output
  // before W_UV is the probability-weighted latent sum o-bar_h = sum_t p_h(t) c(t).
  // Work items are (token, group of heads): a group reads each cache row once for all its
  // heads, and as many groups as threads per token keep the cache reads few.
  const int64_t context = pos0 + n;
  const bool threaded = heads_threaded(pool, H, int64_t(H) * n * (context + r) * width);
  const int threads = threaded ? int(pool->size()) : 1;
  const int group = std::min(kMaxHeadGroup, (H + threads - 1) / threads);
  const int groups = (H + group - 1) / group;
  const SimdLevel level = simd_level();
  for_items(pool, threaded, size_t(n) * groups, [&](size_t item) {
    const int64_t t = int64_t(item) / groups;
    const int h0 = int(item % size_t(groups)) * group, G = std::min(group, H - h0);
    const int64_t len = pos0 + t + 1;
    std::vector<float> pr(size_t(G) * len);
    const float* q = &qabs[(size_t(t) * H + h0) * width];
    float* o = &latent_out[(size_t(t) * H + h0) * r];
    auto attend = [&](const auto* rows) {  // f32 or bf16 rows (shared/model/mla_cache.h)
      mla_scores(level, G, q, width, rows, len, width, softmax_scale, pr.data(), len);
      for (int g = 0; g < G; ++g) softmax(&pr[size_t(g) * len], int(len));
      mla_weighted_sum(level, G, pr.data(), len, rows, len, width, r, o, r);
    };
    if (cache.format == MlaCacheFormat::BF16)
      attend(cache.rows_bf16.data());
    else
      attend(cache.rows.data());
  });
}

void mla_output(const ModelConfig& c, const MlaWeights& w, const MlaProjections& p, int64_t n, float* y,
                ThreadPool* pool) {
  std::vector<float> attn(size_t(n) * c.n_heads * c.v_head);
  apply_w_uv(c, w, p.latent.data(), n, attn.data(), pool);
  // K3 gates each head output with sigmoid(g_proj x) after W_UV, before W_o (MODELS.md A.4).
  if (!p.gate.empty())
    elementwise().mul_sigmoid(attn.data(), p.gate.data(), n * w.o_proj.cols);
  // y = W_o [o_0; ...; o_{H-1}].
  matmul(w.o_proj, attn.data(), n, y);
}

}  // namespace waste
