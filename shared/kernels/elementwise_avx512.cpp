// elementwise.h on AVX-512F, 16 lanes (the algorithm: elementwise_math.h).
#include <immintrin.h>

#include "shared/kernels/elementwise.h"
#include "shared/kernels/elementwise_math.h"
#include "shared/kernels/simd_traits.h"

namespace waste {
namespace {

// The traits' loads, stores, set1 and adds, plus what the elementwise algorithm needs besides
// (simd_traits.h has the rest of this ISA's operations).
struct Avx512Lanes : simd::Avx512 {
  using M = __mmask16;
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return mul_exact(a, b); }  // never fused with a following add
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V neg(V a) { return from_bits(_mm512_xor_si512(bits(a), _mm512_set1_epi32(int32_t(0x80000000u)))); }
  static M lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M eq(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M is_nan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M or_m(M a, M b) { return M(a | b); }
  static V select(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
  static I round_i(V a) { return _mm512_cvtps_epi32(a); }
  static V to_f(I a) { return _mm512_cvtepi32_ps(a); }
  static I bits(V a) { return _mm512_castps_si512(a); }
  static V from_bits(I b) { return _mm512_castsi512_ps(b); }
  static I sub_i(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I and_i(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_i(I a, I b) { return _mm512_or_si512(a, b); }
  template <int k>
  static I shl_i(I a) { return _mm512_slli_epi32(a, k); }
  template <int k>
  static I shr_i(I a) { return _mm512_srli_epi32(a, k); }
};

}  // namespace

const ElementwiseKernels kElementwiseAvx512 = elementwise_detail::kernels_of<Avx512Lanes>("avx512");

}  // namespace waste
