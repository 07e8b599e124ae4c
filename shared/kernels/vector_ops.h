// Small f32 vector helpers for the model code. All take n elements; outputs may alias
// inputs where noted. Reductions (dot, rmsnorm) use AVX2 (x86) or NEON (aarch64) when
// simd_level() allows and a portable path otherwise; each path sums in a fixed order, so results are deterministic
// for a given path (the paths may differ from each other in the last bits).
#pragma once
#include <cstdint>

namespace waste {

// sum_i a[i] * b[i]
float dot(const float* a, const float* b, int64_t n);
// sum_i x[i] * x[i]
float sum_squares(const float* x, int64_t n);
// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);
// x[i] *= a
void scale(float* x, float a, int64_t n);
// out[i] = a[i] + b[i]   (out may be a or b)
void add(const float* a, const float* b, float* out, int64_t n);
// out[i] = x[i] * w[i] / sqrt(mean(x^2) + eps), in f32   (out may be x)
void rmsnorm(const float* x, const float* w, float eps, float* out, int64_t n);

// The portable reductions, and the AVX2 and NEON ones (internal; for tests; each SIMD one
// exists only in builds for its architecture).
float dot_scalar(const float* a, const float* b, int64_t n);
float sum_squares_scalar(const float* x, int64_t n);
float dot_avx2(const float* a, const float* b, int64_t n);
float sum_squares_avx2(const float* x, int64_t n);
float dot_neon(const float* a, const float* b, int64_t n);
float sum_squares_neon(const float* x, int64_t n);
void axpy_scalar(float a, const float* x, float* y, int64_t n);
void axpy_avx2(float a, const float* x, float* y, int64_t n);

}  // namespace waste
