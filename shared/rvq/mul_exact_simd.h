// mul_exact: a SIMD product the compiler may not fuse with the following add. GCC contracts
// intrinsic mul + add into FMA in C++ mode; the empty asm makes the product a value it cannot
// see through, so every path rounds exactly like the scalar reference (multiply, then add).
// Only for the *_avx2.cpp / *_avx512.cpp files of shared/rvq: each overload is compiled only
// when the including file's target flags allow it.
#pragma once
#include <immintrin.h>

namespace waste::rvq_detail {
namespace {

#if defined(__AVX2__)
inline __m256 mul_exact(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  asm("" : "+v"(p));
  return p;
}
#endif

#if defined(__AVX512F__)
inline __m512 mul_exact(__m512 a, __m512 b) {
  __m512 p = _mm512_mul_ps(a, b);
  asm("" : "+v"(p));
  return p;
}
#endif

}  // namespace
}  // namespace waste::rvq_detail
