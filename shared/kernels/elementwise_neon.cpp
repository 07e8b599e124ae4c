// elementwise.h on Advanced SIMD (aarch64), 4 lanes (the algorithm: elementwise_math.h).
#include <arm_neon.h>

#include "shared/kernels/elementwise.h"
#include "shared/kernels/elementwise_math.h"
#include "shared/kernels/simd_traits.h"

namespace waste {
namespace {

// The traits' loads, stores, set1 and adds, plus what the elementwise algorithm needs besides
// (simd_traits.h has the rest of this ISA's operations).
struct NeonLanes : simd::Neon {
  using M = uint32x4_t;  // all ones where true
  static V sub(V a, V b) { return vsubq_f32(a, b); }
  static V mul(V a, V b) { return mul_exact(a, b); }  // never fused with a following add
  static V div(V a, V b) { return vdivq_f32(a, b); }
  static V neg(V a) { return vnegq_f32(a); }
  static M lt(V a, V b) { return vcltq_f32(a, b); }
  static M gt(V a, V b) { return vcgtq_f32(a, b); }
  static M eq(V a, V b) { return vceqq_f32(a, b); }
  static M is_nan(V a) { return vmvnq_u32(vceqq_f32(a, a)); }
  static M or_m(M a, M b) { return vorrq_u32(a, b); }
  static V select(M m, V a, V b) { return vbslq_f32(m, a, b); }
  static I round_i(V a) { return vcvtnq_s32_f32(a); }
  static V to_f(I a) { return vcvtq_f32_s32(a); }
  static I bits(V a) { return vreinterpretq_s32_f32(a); }
  static V from_bits(I b) { return vreinterpretq_f32_s32(b); }
  static I sub_i(I a, I b) { return vsubq_s32(a, b); }
  static I and_i(I a, I b) { return vandq_s32(a, b); }
  static I or_i(I a, I b) { return vorrq_s32(a, b); }
  template <int k>
  static I shl_i(I a) { return vshlq_n_s32(a, k); }
  template <int k>
  static I shr_i(I a) { return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(a), k)); }
};

}  // namespace

const ElementwiseKernels kElementwiseNeon = elementwise_detail::kernels_of<NeonLanes>("neon");

}  // namespace waste
