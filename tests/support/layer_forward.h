// A whole attention layer for one session in one call (project, mix or attend, output): what
// the tests compare the batched path and the pools with. The engine runs the three steps
// itself, on a batch of sessions (Model::mla_rows, Model::kda_rows).
#pragma once
#include <cstdint>

#include "compute/model/kda.h"
#include "compute/model/mla.h"

namespace waste {

class ThreadPool;

// x: n normalised hidden rows [n, D], consumed in order; updates `s`; y gets [n, D].
// Several tokens go through the chunked form with chunks of `chunk` tokens; one token, or
// chunk <= 1, through the recurrence. Heads on the global thread pool.
void kda_forward(const ModelConfig& c, const KdaWeights& w, KdaState& s, const float* x, int64_t n, float* y,
                 int chunk = kKdaPrefillChunk);
// The same with the heads on `pool` (nullptr: the calling thread alone).
// The result does not depend on the pool: each head is computed whole by one thread.
void kda_forward(const ModelConfig& c, const KdaWeights& w, KdaState& s, const float* x, int64_t n, float* y, int chunk,
                 ThreadPool* pool);

// x: n tokens of normalised hidden [n, D] at positions pos0..pos0+n-1; appends their latents
// to `cache` (bounded by max_ctx) and writes the attention output [n, D] to y. Heads on
// `pool` (nullptr: the calling thread alone); the result does not depend on the pool.
void mla_forward(const ModelConfig& c, const MlaWeights& w, const Rope& rope, float softmax_scale, MlaCache& cache,
                 int64_t max_ctx, int64_t pos0, const float* x, int64_t n, float* y, ThreadPool* pool);

}  // namespace waste
