// NEON dotprod (ARMv8.2 asimddp: SDOT) int8-activation Q8G/Q4G matvec/matmul
// (matvec_int8.h): each SDOT adds four 4-byte dot products into 4 int32 lanes, so a unit
// of 32 columns is two SDOTs into its 4 partial sums. Built with -march=armv8.2-a+dotprod
// (meson: shared_neon_dotprod_sources), chosen when cpu_features().asimddp. The operations
// every NEON variant shares: matvec_int8_neon.h.
#include "shared/kernels/matvec_int8_neon.h"
#include "shared/kernels/matvec_int8_neon_sdot.h"

namespace waste {

void matmul_int8_neon_dotprod(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul_int8<kernel_detail::NeonInt8Ops<kernel_detail::Sdot>>(w, x, n, y, pool);
}

}  // namespace waste
