// Internal: one traits struct per SIMD instruction set, the only place the kernels name
// intrinsics for the operations they share. Each kernel family writes its algorithm once as
// a template over these traits (shared/kernels/matvec_tiles.h, vector_ops_simd.h,
// compute/model/attention_kernels_simd.h, shared/rvq/book_search_simd.h) and each per-ISA
// translation unit (*_avx2.cpp, *_avx512.cpp, built with that ISA's flags by meson) only
// instantiates it. A new ISA is one more struct here and its dispatch entry.
//
// Include only from those per-ISA files: a struct is defined only when the file's target
// flags allow it (an AVX-512 file sees both). Everything is in an anonymous namespace, so
// every translation unit has its own copies: the linker can never hand an AVX2 caller a
// function compiled with the AVX-512 flags (and templates instantiated with these traits
// are internal too).
//
// What a traits struct provides (V = kLanes f32 lanes, I = kLanes int32 lanes):
//   zero, set1, load, load_aligned, load_tail (first n lanes, rest 0), store, store_aligned,
//   add, mul, fma(a, b, c) = a*b + c, fnma(a, b, c) = c - a*b,
//   mul_exact(a, b): a product the compiler may not fuse with a following add,
//   sum(v): the lanes added in a fixed order (a path's results depend on it), f16(h): one
//   f16 as f32,
//   load_bf16 / load_f16 (+ _tail): kLanes 16-bit floats widened exactly,
//   load_i8: kLanes int8 as f32,
//   iota, set1_i, add_i, store_i, keep_less (argmin step: lanes where a < best strictly).
// Q4G decode differs in kind, not only width, so it is a traits operation (q4_scale /
// q4_decode, see each struct).
//
// aarch64: Advanced SIMD (NEON) is part of the ARMv8.0-A baseline, so the Neon struct needs
// no extra flags (its files are in meson's shared_neon_sources only to keep the pattern: one
// list per instruction set). The dotprod / i8mm files are compiled with their -march
// extensions and include this header too (Neon is all they share with the float kernels).
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers build pass-through operands from _mm512_undefined_*(), a
// self-initialized variable that -Wmaybe-uninitialized flags once inlined; it is not a bug.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace waste::simd {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
struct Avx2 {
  using V = __m256;
  using I = __m256i;
  static constexpr int kLanes = 8;

  // All-ones in the first n of 8 lanes, for the masked tail loads.
  static I tail_mask(int64_t n) {
    alignas(32) static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ones + 8 - n));
  }
  // Up to 8 16-bit values, zero-filled, so a tail never reads past the row.
  static __m128i load_u16_tail(const uint16_t* p, int n) {
    uint16_t buf[8] = {};
    std::memcpy(buf, p, size_t(n) * 2);
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf));
  }

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_aligned(const float* p) { return _mm256_load_ps(p); }
  static V load_tail(const float* p, int64_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_aligned(float* p, V v) { _mm256_store_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  // GCC contracts intrinsic mul + add into FMA in C++ mode; the empty asm makes the product
  // a value it cannot see through, so the rounding is multiply, then add.
  static V mul_exact(V a, V b) {
    V p = _mm256_mul_ps(a, b);
    asm("" : "+v"(p));
    return p;
  }
  static float f16(uint16_t h) { return _cvtsh_ss(h); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // bf16 is the top half of an f32: widen to 32 bits and shift left.
  static V widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  static V load_bf16(const uint16_t* p) { return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V load_bf16_tail(const uint16_t* p, int n) { return widen_bf16(load_u16_tail(p, n)); }
  static V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V load_f16_tail(const uint16_t* p, int n) { return _mm256_cvtph_ps(load_u16_tail(p, n)); }
  static V load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }

  // Q4G: 16 bytes -> 32 values (nibble - 8) * s in 32 / kLanes = 4 vectors: low nibbles of
  // bytes 0-7, 8-15, then high nibbles of bytes 0-7, 8-15. Each byte is widened to a 32-bit
  // lane and nibble*s - 8s is one fma, which is exact (the true (nibble-8)*s fits in an f32).
  // Without a 16-entry float permute (AVX2's vpermps has 8) this beats a table lookup.
  struct Q4Scale { V scale, offset; };
  static Q4Scale q4_scale(float s) { return {_mm256_set1_ps(s), _mm256_set1_ps(-8.0f * s)}; }
  static void q4_decode(const uint8_t* p, const Q4Scale& s, V* w) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i nib = _mm256_set1_epi32(15);
    const __m256i b0 = _mm256_cvtepu8_epi32(bytes);
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b0, nib)), s.scale, s.offset);
    w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b1, nib)), s.scale, s.offset);
    w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)), s.scale, s.offset);
    w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)), s.scale, s.offset);
  }

  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static I set1_i(int32_t a) { return _mm256_set1_epi32(a); }
  static I add_i(I a, I b) { return _mm256_add_epi32(a, b); }
  static void store_i(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void keep_less(V a, I idx, V& best, I& best_idx) {
    const V lt = _mm256_cmp_ps(a, best, _CMP_LT_OQ);
    best = _mm256_blendv_ps(best, a, lt);
    best_idx = _mm256_blendv_epi8(best_idx, idx, _mm256_castps_si256(lt));
  }
};
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
struct Avx512 {
  using V = __m512;
  using I = __m512i;
  static constexpr int kLanes = 16;

  static __mmask16 tail_mask(int64_t n) { return __mmask16((1u << n) - 1); }

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_aligned(const float* p) { return _mm512_load_ps(p); }
  static V load_tail(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_aligned(float* p, V v) { _mm512_store_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V mul_exact(V a, V b) {  // see Avx2::mul_exact
    V p = _mm512_mul_ps(a, b);
    asm("" : "+v"(p));
    return p;
  }
  static float f16(uint16_t h) { return _cvtsh_ss(h); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }

  static V widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static V load_bf16(const uint16_t* p) { return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V load_bf16_tail(const uint16_t* p, int n) { return widen_bf16(_mm256_maskz_loadu_epi16(tail_mask(n), p)); }
  static V load_f16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V load_f16_tail(const uint16_t* p, int n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p)); }
  static V load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }

  // Q4G: 16 bytes -> 32 values in 2 vectors (low nibbles = even columns, then high = odd).
  // Each byte widened to a 32-bit lane indexes a 16-entry table of (nibble - 8) * scale with
  // its low nibble (vpermps reads only the low 4 bits), then with its high nibble after a
  // shift: one permute per 16 values, where AVX2 needs an fma and two integer operations.
  struct Q4Scale { V table; };
  static Q4Scale q4_scale(float s) {
    return {_mm512_mul_ps(_mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_ps(s))};
  }
  static void q4_decode(const uint8_t* p, const Q4Scale& s, V* w) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    w[0] = _mm512_permutexvar_ps(b, s.table);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), s.table);
  }

  static I iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static I set1_i(int32_t a) { return _mm512_set1_epi32(a); }
  static I add_i(I a, I b) { return _mm512_add_epi32(a, b); }
  static void store_i(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static void keep_less(V a, I idx, V& best, I& best_idx) {
    const __mmask16 lt = _mm512_cmp_ps_mask(a, best, _CMP_LT_OQ);
    best = _mm512_mask_mov_ps(best, lt, a);
    best_idx = _mm512_mask_mov_epi32(best_idx, lt, idx);
  }
};
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
struct Neon {
  using V = float32x4_t;
  using I = int32x4_t;
  static constexpr int kLanes = 4;

  static V zero() { return vdupq_n_f32(0.0f); }
  static V set1(float a) { return vdupq_n_f32(a); }
  static V load(const float* p) { return vld1q_f32(p); }
  static V load_aligned(const float* p) { return vld1q_f32(p); }  // NEON loads take any alignment
  // No masked loads on NEON: the first n lanes go through a zeroed buffer, so a tail never
  // reads past the end of its array.
  static V load_tail(const float* p, int64_t n) {
    float buf[4] = {};
    std::memcpy(buf, p, size_t(n) * 4);
    return vld1q_f32(buf);
  }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static void store_aligned(float* p, V v) { vst1q_f32(p, v); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }   // c + a*b, one rounding
  static V fnma(V a, V b, V c) { return vfmsq_f32(c, a, b); }  // c - a*b, one rounding
  static V mul_exact(V a, V b) {  // see Avx2::mul_exact ("w": any SIMD register)
    V p = vmulq_f32(a, b);
    asm("" : "+w"(p));
    return p;
  }
  static float f16(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }
  // The same tree as Avx2::sum on half the lanes: upper half onto lower, then the two left.
  // (Not vaddvq_f32: its pairing is (0+1)+(2+3), a different order than the x86 paths use.)
  static float sum(V v) {
    const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
  }

  // 4 x 16-bit values, zero-filled past n, so a tail never reads past the row.
  static uint16x4_t load_u16_tail(const uint16_t* p, int n) {
    uint16_t buf[4] = {};
    std::memcpy(buf, p, size_t(n) * 2);
    return vld1_u16(buf);
  }
  // bf16 is the top half of an f32: widen to 32 bits shifted left by 16 (one USHLL).
  static V widen_bf16(uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); }
  static V load_bf16(const uint16_t* p) { return widen_bf16(vld1_u16(p)); }
  static V load_bf16_tail(const uint16_t* p, int n) { return widen_bf16(load_u16_tail(p, n)); }
  // FCVTL (f16 -> f32) is ARMv8.0 Advanced SIMD; only f16 arithmetic needs asimdhp.
  static V load_f16(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static V load_f16_tail(const uint16_t* p, int n) { return vcvt_f32_f16(vreinterpret_f16_u16(load_u16_tail(p, n))); }
  // 4 bytes (not the 8 of a D register: the last chunk of the last row ends the array).
  static V load_i8(const int8_t* p) {
    uint32_t b;
    std::memcpy(&b, p, 4);
    const int16x4_t h = vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(b))));
    return vcvtq_f32_s32(vmovl_s16(h));
  }

  // Q4G: 16 bytes -> 32 values in 8 vectors: low nibbles of bytes 0-3, 4-7, 8-11, 12-15
  // (the even columns), then the high nibbles likewise (the odd ones). The 8 is subtracted in
  // the byte lanes, so each vector is an exact small integer times the scale (one FMUL).
  struct Q4Scale { V scale; };
  static Q4Scale q4_scale(float s) { return {vdupq_n_f32(s)}; }
  static void q4_decode(const uint8_t* p, const Q4Scale& s, V* w) {
    const uint8x16_t bytes = vld1q_u8(p);
    const int8x16_t eight = vdupq_n_s8(8);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(15))), eight);
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4)), eight);
    auto widen4 = [&](int8x16_t b, V* out) {
      const int16x8_t h0 = vmovl_s8(vget_low_s8(b)), h1 = vmovl_high_s8(b);
      out[0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h0))), s.scale);
      out[1] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(h0)), s.scale);
      out[2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h1))), s.scale);
      out[3] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(h1)), s.scale);
    };
    widen4(lo, w);
    widen4(hi, w + 4);
  }

  static I iota() {
    alignas(16) static const int32_t k[4] = {0, 1, 2, 3};
    return vld1q_s32(k);
  }
  static I set1_i(int32_t a) { return vdupq_n_s32(a); }
  static I add_i(I a, I b) { return vaddq_s32(a, b); }
  static void store_i(int32_t* p, I v) { vst1q_s32(p, v); }
  static void keep_less(V a, I idx, V& best, I& best_idx) {
    const uint32x4_t lt = vcltq_f32(a, best);  // false for NaN, as _CMP_LT_OQ
    best = vbslq_f32(lt, a, best);
    best_idx = vbslq_s32(lt, idx, best_idx);
  }
};
#endif

}  // namespace
}  // namespace waste::simd
