#include "tests/support/layer_forward.h"

#include <vector>

#include "shared/util/thread_pool.h"

namespace waste {

void kda_forward(const ModelConfig& c, const KdaWeights& w, KdaState& s, const float* x, int64_t n, float* y,
                 int chunk) {
  kda_forward(c, w, s, x, n, y, chunk, &ThreadPool::global());
}

void kda_forward(const ModelConfig& c, const KdaWeights& w, KdaState& s, const float* x, int64_t n, float* y, int chunk,
                 ThreadPool* pool) {
  KdaProjections p;
  kda_project(c, w, x, n, p);
  std::vector<float> o(size_t(n) * c.kda_heads * c.kda_head_dim);
  kda_mix(c, w, s, p, 0, n, o.data(), chunk, pool);
  kda_output(w, o.data(), n, y);
}

void mla_forward(const ModelConfig& c, const MlaWeights& w, const Rope& rope, float softmax_scale, MlaCache& cache,
                 int64_t max_ctx, int64_t pos0, const float* x, int64_t n, float* y, ThreadPool* pool) {
  MlaProjections p;
  mla_project(c, w, x, n, p, pool);
  mla_attend(c, w, rope, softmax_scale, cache, max_ctx, pos0, p, 0, n, pool);
  mla_output(c, w, p, n, y, pool);
}

}  // namespace waste
