// AVX-512 (F, BW, VL) trunk matvec/matmul (matvec_tiles.h): 16 f32 lanes, 4-row tiles for
// one token and 4-row x 4-token tiles for several (32 zmm registers).
#include <immintrin.h>

#include "shared/kernels/matvec_tiles.h"
#include "shared/kernels/simd_traits.h"

namespace waste {

void matmul_avx512(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernel_detail::matmul<simd::Avx512, 4, 4, 4>(w, x, n, y, pool);
}

// dequantize_row's Q4G case 32 columns (16 bytes, one group's share) at a time: the nibbles
// interleaved back into column order, (q - 8) converted exactly, times the group's scale: the
// same single rounding as the scalar loop.
void dequantize_row_q4g_avx512(const uint8_t* q, const uint16_t* scales, int64_t cols, int64_t group, float* out) {
  const __m128i low = _mm_set1_epi8(0x0f);
  const __m512i eight = _mm512_set1_epi32(8);
  for (int64_t c = 0; c < cols; c += 32) {
    const __m512 scale = _mm512_set1_ps(_cvtsh_ss(scales[c / group]));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + c / 2));
    const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
    const __m128i first = _mm_unpacklo_epi8(lo, hi), second = _mm_unpackhi_epi8(lo, hi);  // columns in order
    const __m512 v0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(first), eight));
    const __m512 v1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(second), eight));
    _mm512_storeu_ps(out + c, _mm512_mul_ps(v0, scale));
    _mm512_storeu_ps(out + c + 16, _mm512_mul_ps(v1, scale));
  }
}

}  // namespace waste
