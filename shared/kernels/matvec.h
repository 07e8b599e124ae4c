// Trunk matrix-vector products in every trunk format (F32, BF16, F16, Q8G, Q4G), straight
// on the stored bytes. Layouts are those of docs/FORMAT.md "Trunk tensors".
#pragma once
#include <cstdint>

#include "shared/container/format.h"

namespace waste {

class ThreadPool;

// A matrix [rows, cols] as stored: row-major values, and for Q8G/Q4G a separate plane of
// f16 scales, one per `group` consecutive inputs of a row.
struct MatrixView {
  TensorFormat format = TensorFormat::F32;
  int64_t rows = 0, cols = 0;
  uint32_t group = 0;
  const void* data = nullptr;
  const uint16_t* scales = nullptr;  // Q8G/Q4G only
};

// y[rows] = W x[cols], on the best SIMD path (cpu.h), split over rows on the global thread
// pool when the matrix is large (> 256K weights), else on the calling thread. Each row's sum
// is computed by one thread in a fixed order, so y does not depend on the thread count.
// Must not be called from inside a parallel_for body of the same pool.
void matvec(const MatrixView& w, const float* x, float* y);
// y[t][rows] = W x[t][cols] for n tokens; reads W from memory once per 64 tokens. On every
// path each y[t] is bit-identical to matvec(w, x[t]) (same per-row summation order).
// Across paths results differ in the last bits: scalar sums in double, AVX2 in 8 f32 lanes,
// AVX-512 in 16 (all decode weights exactly; they agree exactly when every product and
// partial sum is representable in f32).
void matmul(const MatrixView& w, const float* x, int64_t n, float* y);
// The same on a given pool (always split over it, whatever the size).
void matvec(const MatrixView& w, const float* x, float* y, ThreadPool& pool);
void matmul(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool& pool);

// The portable reference every SIMD path is tested against.
void matvec_scalar(const MatrixView& w, const float* x, float* y, int64_t row_begin, int64_t row_end);

// Dequantizes row r into out[cols] (for the embedding row read per token, and tests).
void dequantize_row(const MatrixView& w, int64_t r, float* out);

}  // namespace waste
