// NEON (Advanced SIMD, ARMv8.0-A) VQ3R kernels: table build 4 entries per instruction, and
// lookups of 16 rows at once into the 256-entry byte tables with one TBL and three TBX over
// 64-byte quarters (a TBL/TBX register list holds at most 4 x 16 bytes). The lookups are the
// biased unsigned bytes of the scalar reference, widened into u16 sums per block of 8 vector
// positions (UADDW/UADDW2: at most 8 * 3 * 255 = 6120, exact) and flushed to f32 as the
// scalar reference does, so the output is bit-identical to it (and to the AVX-512 path).
//
// Why TBL and not decode (the AVX2 path): one 16-row lookup of one stage is 1 TBL + 3 TBX + 3
// index adjustments + 2 widening adds; decoding costs 3 loads, 2 adds and an FMA per 8-dim
// vector of one row (docs/MEASUREMENTS.md, 2026-12-04, has the counts per weight).
// Why no dotprod variant: UDOT sums four adjacent bytes, which here are four different rows
// (the codes are laid out row-minor, 64 rows per stage line), so it cannot replace the
// widening adds without a byte transpose that costs more than it saves.
#include <arm_neon.h>

#include <algorithm>
#include <vector>

#include "shared/kernels/prefetch.h"
#include "shared/rvq/kernel_paths.h"
#include "shared/util/half.h"

namespace waste::rvq_detail {

namespace {

// A product the compiler may not fuse with the following add (GCC contracts vmulq + vaddq
// into FMLA in C++ mode): the reference multiplies, then adds (shared/rvq/mul_exact.h).
inline float32x4_t mul_exact4(float32x4_t a, float32x4_t b) {
  float32x4_t p = vmulq_f32(a, b);
  asm("" : "+w"(p));
  return p;
}

}  // namespace

float table_block_neon(const float* x, int nv, const BooksT& b, uint8_t* q) {
  constexpr int kPer = kVqStages * kVqEntries;
  alignas(64) float f[kLutBlockVectors][kPer];
  // FMAXNM ignores a quiet NaN like the reference's std::max(maxabs, |a|) does.
  float32x4_t maxv = vdupq_n_f32(0.0f);
  for (int v = 0; v < nv; ++v) {
    float32x4_t xs[kVqDim];
    for (int d = 0; d < kVqDim; ++d) xs[d] = vdupq_n_f32(x[v * kVqDim + d]);
    // 16 entries per step, so each dimension's row of the transposed books is one 64-byte
    // LD1 (the 4-entry version spent 8 of its 29 instructions per 4 entries on loads).
    for (int s = 0; s < kVqStages; ++s)
      for (int j = 0; j < kVqEntries; j += 16) {
        float32x4x4_t c = vld1q_f32_x4(&b.t[s][0][j]);
        float32x4_t a[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) a[k] = mul_exact4(c.val[k], xs[0]);
#pragma GCC unroll 7
        for (int d = 1; d < kVqDim; ++d) {
          c = vld1q_f32_x4(&b.t[s][d][j]);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) a[k] = vaddq_f32(a[k], mul_exact4(c.val[k], xs[d]));
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          vst1q_f32(&f[v][s * kVqEntries + j + 4 * k], a[k]);
          maxv = vmaxnmq_f32(maxv, vabsq_f32(a[k]));
        }
      }
  }
  const float maxabs = vmaxnmvq_f32(maxv);
  const float inv_s = maxabs > 0 ? 127.0f / maxabs : 0.0f;
  const float32x4_t inv = vdupq_n_f32(inv_s);
  const int32x4_t lo = vdupq_n_s32(-127), hi = vdupq_n_s32(127), bias = vdupq_n_s32(kLutBias);
  for (int v = 0; v < nv; ++v)
    for (int i = 0; i < kPer; i += 16) {
      uint16x8_t h[2];
      for (int k = 0; k < 2; ++k) {
        int32x4_t r[2];
        for (int m = 0; m < 2; ++m) {
          // FCVTNS rounds to nearest, ties to even, as nearbyint does in the reference.
          const int32x4_t c = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(&f[v][i + 8 * k + 4 * m]), inv));
          r[m] = vaddq_s32(vminq_s32(vmaxq_s32(c, lo), hi), bias);  // 1..255
        }
        h[k] = vcombine_u16(vmovn_u32(vreinterpretq_u32_s32(r[0])), vmovn_u32(vreinterpretq_u32_s32(r[1])));
      }
      vst1q_u8(q + v * kPer + i, vcombine_u8(vmovn_u16(h[0]), vmovn_u16(h[1])));
    }
  return maxabs / 127.0f;
}

namespace {

constexpr int kTablePrefetchAhead = 4;  // vector positions; as lut_avx512.cpp (measured there)
constexpr int kCodePrefetchAhead = 8;   // vector positions; as lut_avx512.cpp (measured there)
constexpr int kChunks = kVqTileRows / 16;  // 16-row lookups per tile line

// One 16-row lookup of a 256-entry table T (four 64-byte quarters): TBL gives the entries of
// indices 0-63 and 0 elsewhere; each TBX fills in the next quarter's lanes from idx - 64k,
// which is in 0..63 exactly for that quarter (out-of-range lanes, including the wrapped
// ones below 0, keep what they have).
// (The quarters are four named values, not an array: GCC 12 kept an array of register tuples
// on the stack, a store and a reload per quarter and stage.)
inline uint8x16_t lookup256(uint8x16x4_t t0, uint8x16x4_t t1, uint8x16x4_t t2, uint8x16x4_t t3, uint8x16_t idx,
                            uint8x16_t c64) {
  uint8x16_t r = vqtbl4q_u8(t0, idx);
  uint8x16_t k = vsubq_u8(idx, c64);
  r = vqtbx4q_u8(r, t1, k);
  k = vsubq_u8(k, c64);
  r = vqtbx4q_u8(r, t2, k);
  k = vsubq_u8(k, c64);
  return vqtbx4q_u8(r, t3, k);
}

// One row tile (64 rows) for all n inputs. accf holds n*64 floats, row order. One tile, not the
// AVX-512 kernel's groups of 4: a stage's table takes 16 of the 32 vector registers and the 64
// rows' u16 sums 8 more, so a second tile's sums would spill.
// noinline: inlined into matmul_tiles_neon, GCC 12 ran out of general registers and spilled
// the loop's pointers to the stack inside the stage loop.
__attribute__((noinline)) void lut_tile(const uint8_t* codes, const uint16_t* scales, int rows, int G,
                                        const RvqTables* const* t, int n, float* y, size_t y_stride, int tile,
                                        float* accf) {
  const uint8_t* base = codes + size_t(tile) * G * kVqStages * kVqTileRows;
  std::fill(accf, accf + size_t(n) * kVqTileRows, 0.0f);
  const uint8x16_t c64 = vdupq_n_u8(64);
  for (int g0 = 0; g0 < G; g0 += kLutBlockVectors) {
    const int g1 = std::min(G, g0 + kLutBlockVectors);
    const uint16x8_t bias = vdupq_n_u16(uint16_t(kLutBias * kVqStages * (g1 - g0)));
    for (int i = 0; i < n; ++i) {
      const uint8_t* q = t[i]->q.data();
      uint16x8_t acc[2 * kChunks];
      for (auto& a : acc) a = vdupq_n_u16(0);
      for (int g = g0; g < g1; ++g) {
        const uint8_t* tg = q + size_t(g) * kVqStages * kVqEntries;
        const uint8_t* c = base + size_t(g) * kVqStages * kVqTileRows;
        // A prefill's tables come from memory, not L2 (see lut_avx512.cpp): fetch ahead.
        if (g + kTablePrefetchAhead < G)
          prefetch_range(tg + kTablePrefetchAhead * kVqStages * kVqEntries, kVqStages * kVqEntries);
        // A decode's codes stream from memory once; with n > 1 they are in L1 after token 0.
        if (i == 0 && g + kCodePrefetchAhead < G)
          prefetch_range(c + kCodePrefetchAhead * kVqStages * kVqTileRows, kVqStages * kVqTileRows);
        for (int s = 0; s < kVqStages; ++s) {
          const uint8_t* ts = tg + s * kVqEntries;
          const uint8x16x4_t t0 = vld1q_u8_x4(ts), t1 = vld1q_u8_x4(ts + 64), t2 = vld1q_u8_x4(ts + 128),
                             t3 = vld1q_u8_x4(ts + 192);
          const uint8x16x4_t idx = vld1q_u8_x4(c + s * kVqTileRows);
          // Unrolled, so acc[] and idx stay in registers (GCC 12 left both on the stack).
#pragma GCC unroll 4
          for (int k = 0; k < kChunks; ++k) {
            const uint8x16_t v = lookup256(t0, t1, t2, t3, idx.val[k], c64);
            acc[2 * k] = vaddw_u8(acc[2 * k], vget_low_u8(v));
            acc[2 * k + 1] = vaddw_high_u8(acc[2 * k + 1], v);
          }
        }
      }
      // Flush: (sum - 384 * positions) as a signed integer, times the block scale, added.
      const float32x4_t sc = vdupq_n_f32(t[i]->block_scale[size_t(g0 / kLutBlockVectors)]);
      float* a = accf + size_t(i) * kVqTileRows;
      for (int h = 0; h < 2 * kChunks; ++h) {
        const int16x8_t e = vreinterpretq_s16_u16(vsubq_u16(acc[h], bias));
        const int32x4_t parts[2] = {vmovl_s16(vget_low_s16(e)), vmovl_high_s16(e)};
        for (int p = 0; p < 2; ++p) {
          float* ap = a + 8 * h + 4 * p;
          vst1q_f32(ap, vaddq_f32(vld1q_f32(ap), mul_exact4(vcvtq_f32_s32(parts[p]), sc)));
        }
      }
    }
  }
  const int r0 = tile * kVqTileRows;
  const int r_end = std::min(rows - r0, kVqTileRows);
  for (int i = 0; i < n; ++i) {
    const float* a = accf + size_t(i) * kVqTileRows;
    float* yi = y + size_t(i) * y_stride + size_t(r0);
    for (int rr = 0; rr < r_end; ++rr) yi[rr] = a[rr] * f16_to_f32(scales[r0 + rr]);
  }
}

}  // namespace

void matmul_tiles_neon(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                       int n, float* y, size_t y_stride, int tile_begin, int tile_end) {
  const int G = cols / kVqDim;
  thread_local std::vector<float> accf;
  // Tokens are applied while a block of codes is in L1; the accumulators of every token are
  // kept, so bound the token chunk (as the AVX-512 path does).
  constexpr int kMaxTokens = 64;
  if (accf.size() < size_t(kMaxTokens) * kVqTileRows) accf.resize(size_t(kMaxTokens) * kVqTileRows);
  for (int i0 = 0; i0 < n; i0 += kMaxTokens) {
    const int ni = std::min(kMaxTokens, n - i0);
    for (int tile = tile_begin; tile < tile_end; ++tile)
      lut_tile(codes, scales, rows, G, t + i0, ni, y + size_t(i0) * y_stride, y_stride, tile, accf.data());
  }
}

}  // namespace waste::rvq_detail
