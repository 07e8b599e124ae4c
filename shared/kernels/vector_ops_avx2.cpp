// AVX2 reductions for vector_ops.h (the algorithm: vector_ops_simd.h).
#include "shared/kernels/vector_ops.h"
#include "shared/kernels/simd_traits.h"
#include "shared/kernels/vector_ops_simd.h"

namespace waste {

float dot_avx2(const float* a, const float* b, int64_t n) { return simd::dot<simd::Avx2>(a, b, n); }

float sum_squares_avx2(const float* x, int64_t n) { return dot_avx2(x, x, n); }

void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  using simd::Avx2;
  const auto av = Avx2::set1(a);
  int64_t i = 0;
  for (; i + Avx2::kLanes <= n; i += Avx2::kLanes)
    Avx2::store(y + i, Avx2::add(Avx2::load(y + i), Avx2::mul_exact(av, Avx2::load(x + i))));
  for (; i < n; ++i) {
    float p = a * x[i];
    asm("" : "+x"(p));  // not fused with the add (see Avx2::mul_exact), as the scalar path rounds
    y[i] += p;
  }
}

}  // namespace waste
