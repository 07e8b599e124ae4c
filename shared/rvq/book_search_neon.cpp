// NEON scoring of 4 codebook entries per instruction (the algorithm: book_search_simd.h).
#include <arm_neon.h>

#include <cstdint>

namespace waste::simd {
namespace {

// The operations book_search_simd.h asks of an instruction set (see simd_traits.h for their
// meaning), for Advanced SIMD: 4 f32 / int32 lanes. simd_traits.h has no NEON struct yet (it
// includes <immintrin.h>); when it gets one, this file includes it instead and this struct
// goes (one definition per ISA).
struct Neon {
  using V = float32x4_t;
  using I = int32x4_t;
  static constexpr int kLanes = 4;

  static V set1(float a) { return vdupq_n_f32(a); }
  static V load_aligned(const float* p) { return vld1q_f32(p); }
  static void store_aligned(float* p, V v) { vst1q_f32(p, v); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  // GCC contracts vmulq + vaddq into FMLA in C++ mode; the empty asm makes the product a value
  // it cannot see through, so the rounding is multiply, then add.
  static V mul_exact(V a, V b) {
    V p = vmulq_f32(a, b);
    asm("" : "+w"(p));
    return p;
  }
  static I iota() {
    static const int32_t k[4] = {0, 1, 2, 3};
    return vld1q_s32(k);
  }
  static I set1_i(int32_t a) { return vdupq_n_s32(a); }
  static I add_i(I a, I b) { return vaddq_s32(a, b); }
  static void store_i(int32_t* p, I v) { vst1q_s32(p, v); }
  static void keep_less(V a, I idx, V& best, I& best_idx) {
    const uint32x4_t lt = vcltq_f32(a, best);  // false for NaN, as the scalar a < best
    best = vbslq_f32(lt, a, best);
    best_idx = vbslq_s32(lt, idx, best_idx);
  }
};

}  // namespace
}  // namespace waste::simd

#include "shared/rvq/book_search_simd.h"

namespace waste::rvq_detail {

void scores_neon(const float* q, const StageBook& b, float* out) { scores<simd::Neon>(q, b, out); }

int nearest_neon(const float* q, const StageBook& b, float* best_score) { return nearest<simd::Neon>(q, b, best_score); }

}  // namespace waste::rvq_detail
