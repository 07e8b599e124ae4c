// elementwise.h on AVX2, 8 lanes (the algorithm: elementwise_math.h).
#include <immintrin.h>

#include "shared/kernels/elementwise.h"
#include "shared/kernels/elementwise_math.h"
#include "shared/kernels/simd_traits.h"

namespace waste {
namespace {

// The traits' loads, stores, set1 and adds, plus what the elementwise algorithm needs besides
// (simd_traits.h has the rest of this ISA's operations).
struct Avx2Lanes : simd::Avx2 {
  using M = __m256;  // all ones where true
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return mul_exact(a, b); }  // never fused with a following add
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V neg(V a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static M lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M eq(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static M is_nan(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static M or_m(M a, M b) { return _mm256_or_ps(a, b); }
  static V select(M m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
  static I round_i(V a) { return _mm256_cvtps_epi32(a); }
  static V to_f(I a) { return _mm256_cvtepi32_ps(a); }
  static I bits(V a) { return _mm256_castps_si256(a); }
  static V from_bits(I b) { return _mm256_castsi256_ps(b); }
  static I sub_i(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I and_i(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_i(I a, I b) { return _mm256_or_si256(a, b); }
  template <int k>
  static I shl_i(I a) { return _mm256_slli_epi32(a, k); }
  template <int k>
  static I shr_i(I a) { return _mm256_srli_epi32(a, k); }
};

}  // namespace

const ElementwiseKernels kElementwiseAvx2 = elementwise_detail::kernels_of<Avx2Lanes>("avx2");

}  // namespace waste
