// NEON trunk matvec/matmul (matvec_tiles.h) for every aarch64 path: 4 f32 lanes, 4-row tiles
// for one token and 4-row x 4-token tiles for several (16 accumulators of the 32 q
// registers, as AVX-512 has 32 zmm). BF16 widens by a shift, F16 by FCVTL (ARMv8.0).
#include "shared/kernels/matvec_tiles.h"
#include "shared/kernels/simd_traits.h"

namespace waste {

void matmul_neon(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul<simd::Neon, 4, 4, 4>(w, x, n, y, pool);
}

}  // namespace waste
