// Routed experts stored as VQ3R, through shared/rvq's fused expert apply, behind a small
// interface so the model code does not depend on the kernel headers.
#pragma once
#include <cstdint>
#include <memory>

#include "shared/container/expert_view.h"

namespace waste {

class RvqExpertBatch {
 public:
  // situ=false: SiLU; else SiTU with its two betas.
  RvqExpertBatch(bool situ, float beta, float beta_linear);
  ~RvqExpertBatch();
  RvqExpertBatch(const RvqExpertBatch&) = delete;
  RvqExpertBatch& operator=(const RvqExpertBatch&) = delete;

  // The n rows [n, hidden] that the experts of one layer read. Lookup tables of a row are
  // built once, on first use, and shared by every expert of the layer that reads it. One
  // object is meant to be reused layer after layer: table memory is kept between calls.
  void set_inputs(const float* z, int64_t n, int hidden);
  // out[i * hidden ...] = weights[i] * expert(z[rows[i]]) for i < m (overwritten, not added).
  // The expert's row tiles are spread over the pool.
  void apply_rows(const ExpertView& v, const int64_t* rows, const float* weights, int64_t m, float* out);

  // Several experts at once, each on one thread (the MoE layer's groups: see moe.cpp). build_all
  // builds every row's tables for the layer's codebooks first (over the pool); then
  // apply_rows_alone may run concurrently on different threads, each on the calling thread
  // only, for at most kThreadExpertRows rows (shared/rvq/kernels.h: its buffers are the
  // thread's own, bounded by that). The same bits as apply_rows.
  void build_all(const float* codebooks);
  void apply_rows_alone(const ExpertView& v, const int64_t* rows, const float* weights, int64_t m, float* out) const;

 private:
  // Builds, over the pool, the tables of rows[0, m) (rows null: rows 0 .. m-1) not built yet
  // for `codebooks` (new codebooks: every row's are stale).
  void build_missing(const float* codebooks, const int64_t* rows, int64_t m);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste
