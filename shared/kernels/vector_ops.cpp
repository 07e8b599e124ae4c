#include "shared/kernels/vector_ops.h"

#include <cmath>

#include "shared/util/cpu.h"

namespace waste {

namespace {

// The reductions' SIMD path of this architecture, if simd_level() allows it.
#if defined(__x86_64__)
bool use_simd() {
  const SimdLevel level = simd_level();
  return level == SimdLevel::Avx2 || level == SimdLevel::Avx512;
}
#elif defined(__aarch64__)
bool use_simd() { return simd_level() == SimdLevel::Neon; }
#endif

}  // namespace

// Eight partial sums (lane i takes elements i, i+8, ...), added pairwise at the end: more
// accurate than one running sum and open to auto-vectorization.
float dot_scalar(const float* a, const float* b, int64_t n) {
  float part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += a[i + k] * b[i + k];
  for (int k = 0; i + k < n; ++k) part[k] += a[i + k] * b[i + k];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

float sum_squares_scalar(const float* x, int64_t n) { return dot_scalar(x, x, n); }

float dot(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
  if (use_simd()) return dot_avx2(a, b, n);
#elif defined(__aarch64__)
  if (use_simd()) return dot_neon(a, b, n);
#endif
  return dot_scalar(a, b, n);
}

float sum_squares(const float* x, int64_t n) {
#if defined(__x86_64__)
  if (use_simd()) return sum_squares_avx2(x, n);
#elif defined(__aarch64__)
  if (use_simd()) return sum_squares_neon(x, n);
#endif
  return sum_squares_scalar(x, n);
}

void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The other element-wise helpers are memory-bound one-liners the compiler vectorizes itself
// (on x86 at the baseline's 4 lanes). axpy is not memory-bound where MLA's absorb runs it over
// rows held in L2: AVX2 there, with the same bits on x86 (the product rounded, then the sum;
// the baseline x86-64-v2 has no FMA to contract the scalar loop into).
void axpy(float a, const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (use_simd()) return axpy_avx2(a, x, y, n);
#endif
  axpy_scalar(a, x, y, n);
}

void scale(float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void rmsnorm(const float* x, const float* w, float eps, float* out, int64_t n) {
  if (n <= 0) return;
  const float inv = 1.0f / std::sqrt(sum_squares(x, n) / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

}  // namespace waste
