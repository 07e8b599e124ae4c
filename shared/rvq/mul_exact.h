// Internal to shared/rvq: the scalar product the VQ3R reference paths may not fuse.
#pragma once

namespace waste::rvq_detail {

// a*b rounded to float on its own, never contracted with a following add into one FMA. The
// reference paths define table entries, block flushes (kernel_paths.h) and codebook scores
// (book_search.h) as multiply, then add, the order every SIMD path reproduces with its traits'
// mul_exact. GCC contracts a*b + c in C++ (-ffp-contract=fast is its default outside ISO C)
// wherever the target has a fused multiply-add: on aarch64 always (ARMv8.0 has FMADD), so
// there the plain-C++ reference fused and matched no SIMD path (nor the x86 scalar path);
// x86-64-v2 has no FMA, so x86 scalar code never fused and keeps its plain product (which
// GCC may still vectorize). The empty asm makes the product a value the optimiser cannot see
// through, as simd_traits.h's mul_exact does for vectors.
inline float mul_exact(float a, float b) {
  float p = a * b;
#if defined(__aarch64__)
  asm("" : "+w"(p));  // w: an FP/SIMD register
#elif defined(__x86_64__) && defined(__FMA__)
  asm("" : "+x"(p));  // x: an SSE register
#endif
  return p;
}

}  // namespace waste::rvq_detail
