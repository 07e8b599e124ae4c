// Dispatch of the trunk matvec to the best path. (Scalar only until the SIMD paths land.)
#include "shared/kernels/matvec.h"

namespace waste {

void matvec(const MatrixView& w, const float* x, float* y) { matvec_scalar(w, x, y, 0, w.rows); }

void matmul(const MatrixView& w, const float* x, int64_t n, float* y) {
  for (int64_t t = 0; t < n; ++t) matvec(w, x + t * w.cols, y + t * w.rows);
}

}  // namespace waste
