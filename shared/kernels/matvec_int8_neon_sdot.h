// Internal: the SDOT products of one 32-column unit (the Dot policy of matvec_int8_neon.h),
// shared by the dotprod path and the i8mm path's single rows. Include only from files built
// with +dotprod (matvec_int8_neon_dotprod.cpp, matvec_int8_neon_i8mm.cpp).
#pragma once
#include <arm_neon.h>

namespace waste::kernel_detail {
namespace {

struct Sdot {
  // Lane j of an SDOT adds bytes 4j..4j+3 of a times those of b: exact in int32.
  static int32x4_t q4(int8x16_t lo, int8x16_t hi, int8x16_t even, int8x16_t odd) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, even), hi, odd);
  }
  static int32x4_t q8(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
  }
};

}  // namespace
}  // namespace waste::kernel_detail
