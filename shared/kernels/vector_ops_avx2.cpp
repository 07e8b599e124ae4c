// AVX2 reductions for vector_ops.h (the algorithm: vector_ops_simd.h).
#include "shared/kernels/vector_ops.h"
#include "shared/kernels/simd_traits.h"
#include "shared/kernels/vector_ops_simd.h"

namespace waste {

float dot_avx2(const float* a, const float* b, int64_t n) { return simd::dot<simd::Avx2>(a, b, n); }

float sum_squares_avx2(const float* x, int64_t n) { return dot_avx2(x, x, n); }

}  // namespace waste
