// NEON reductions for vector_ops.h (the algorithm: vector_ops_simd.h).
#include "shared/kernels/simd_traits.h"
#include "shared/kernels/vector_ops.h"
#include "shared/kernels/vector_ops_simd.h"

namespace waste {

float dot_neon(const float* a, const float* b, int64_t n) { return simd::dot<simd::Neon>(a, b, n); }

float sum_squares_neon(const float* x, int64_t n) { return dot_neon(x, x, n); }

}  // namespace waste
