// ARMv8.0 NEON int8-activation Q8G/Q4G matvec/matmul (matvec_int8.h), for cores without SDOT
// (Cortex-A53/A72/A73...): SMULL / SMLAL multiply 8 byte pairs into 16-bit lanes, SADDLP /
// SADALP widen neighbouring pairs into the unit's 4 int32 partial sums. The operations every
// NEON variant shares: matvec_int8_neon.h.
#include "shared/kernels/matvec_int8_neon.h"

namespace waste {
namespace {

struct Widening {
  // Q4G: four products per 16-bit lane, each |nibble x q| <= 15 x 127: at most 7620, no
  // overflow. One SADDLP makes the 8 lanes 4 int32 partials.
  static int32x4_t q4(int8x16_t lo, int8x16_t hi, int8x16_t even, int8x16_t odd) {
    int16x8_t s = vmull_s8(vget_low_s8(lo), vget_low_s8(even));
    s = vmlal_high_s8(s, lo, even);
    s = vmlal_s8(s, vget_low_s8(hi), vget_low_s8(odd));
    s = vmlal_high_s8(s, hi, odd);
    return vpaddlq_s16(s);
  }
  // Q8G: weights may be -128, activations are within +-127: two products per 16-bit lane
  // (<= 2 x 128 x 127 = 32512 < 32767), so each 16-byte half gets its own 16-bit sum.
  static int32x4_t q8(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
    const int16x8_t s0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
    const int16x8_t s1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
    return vpadalq_s16(vpaddlq_s16(s0), s1);
  }
};

}  // namespace

void matmul_int8_neon(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul_int8<kernel_detail::NeonInt8Ops<Widening>>(w, x, n, y, pool);
}

}  // namespace waste
