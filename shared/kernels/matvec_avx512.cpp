// AVX-512 (F, BW, VL) trunk matvec/matmul (matvec_tiles.h): 16 f32 lanes, 4-row tiles for
// one token and 4-row x 4-token tiles for several (32 zmm registers).
#include "shared/kernels/matvec_tiles.h"
#include "shared/kernels/simd_traits.h"

namespace waste {

void matmul_avx512(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul<simd::Avx512, 4, 4, 4>(w, x, n, y, pool);
}

}  // namespace waste
