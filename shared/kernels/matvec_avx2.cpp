// AVX2 (+FMA, F16C) trunk matvec/matmul (matvec_tiles.h): 8 f32 lanes, 4-row tiles for one
// token and 2-row x 4-token tiles for several (16 ymm registers).
#include "shared/kernels/matvec_tiles.h"
#include "shared/kernels/simd_traits.h"

namespace waste {

void matmul_avx2(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul<simd::Avx2, 4, 2, 4>(w, x, n, y, pool);
}

}  // namespace waste
