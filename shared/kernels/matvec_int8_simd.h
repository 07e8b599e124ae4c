// Internal: the int8-activation Q8G/Q4G matvec/matmul of the SIMD paths (matvec_int8.h),
// written once over an ISA's int8 operations; matvec_int8_avx2.cpp and _avx512.cpp define
// those operations (struct Ops) and instantiate matmul_int8<Ops>(). Include only from those
// per-ISA files (internal linkage, see simd_traits.h).
//
// Shared here: the rows-outermost loop over a thread's rows, token tiles, the software
// prefetch, and per row and token the definition's accumulation: per block of 16 units, the
// exact integer unit sums minus the weights' excess (Ops::kQ4Shift / kQ8Shift: the unsigned
// encoding adds 2^shift times the unit's activation sum), times (weight scale x activation
// scale), fma'd into the 16 lane accumulators, then the fixed lane tree.
//
// Per ISA (the instructions differ in kind, not only in width): the integer dot products of
// 16 units (AVX2 vpmaddubsw + vpmaddwd, Q8G by the sign trick with no excess; AVX-512 VNNI
// vpdpbusd, Q8G with flipped sign bits; NEON signed x signed, no excess for Q8G), their
// reduction to one sum per unit, the gather of the f16 weight scales, and the 16-lane float
// block (two ymm, one zmm, four NEON q registers).
//
// Ops provides: F / I (16 f32 / int32 lanes), fzero(), load_f(p), cvt(I), mul(F, F),
// fma(a, b, c), sub_shifted(I s, p, shift) = s - (16 int32 at p) << shift, lane_tree(F),
// kTokenTile (tokens per pass over a row, 1..4), kRowTile (rows per pass, 1 or 2),
// kPrefetchBurst and kPrefetchSpreadAbove (which of prefetch.h's two forms the path uses, as
// measured on it), kQ4Shift, kQ8Shift, and as members (over Int8Shape): unit_scales(srow, u0) -> F,
// q4g_sums<T>(wrow, t0, u0, I* out) / q8g_sums<T>(...) -> the integer sums of units
// [u0, u0 + 16) for tokens t0 .. t0+T (excess included), and when kRowTile is 2
// q4g_sums_rows<R, T>(wrow, row_bytes, t0, u0, I (*out)[T]) / q8g_sums_rows: the same for
// rows wrow, wrow + row_bytes.
//
// Per ISA the products are: AVX2 vpmaddubsw + vpmaddwd, AVX-512 VNNI vpdpbusd (x86), and on
// aarch64 SMULL/SMLAL + SADALP, SDOT, or SMMLA (matvec_int8_neon.h).
#pragma once
#include <algorithm>
#include <cstdint>

#include "shared/kernels/matvec_int8.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/kernels/prefetch.h"

namespace waste::kernel_detail {
namespace {

// What every path knows of the matrix and the quantized activations.
struct Int8Shape {
  const MatrixView& w;
  const Int8Activations& act;
  int64_t groups, units_per_group, units, padded_units, cols;
  int group_shift;  // log2(units_per_group)
  const int8_t* q;
  const int32_t* unit_sum;
  const float* unit_scale;
  // The activation quantizer of the path (an Ops with its own declares one of the same name).
  static constexpr QuantizeUnitsFn quantize_units = quantize_units_scalar;

  Int8Shape(const MatrixView& w_, const Int8Activations& a)
      : w(w_), act(a), groups(w_.cols / w_.group), units_per_group(w_.group / 32), units(a.units),
        padded_units(a.padded_units), cols(w_.cols), group_shift(__builtin_ctzll(uint64_t(w_.group / 32))),
        q(a.q.data()), unit_sum(a.unit_sum.data()), unit_scale(a.unit_scale.data()) {}
};

// Rows r .. r+R for tokens t0 .. t0+T of a Q4G (Q4) or Q8G matrix. R > 1 only for Ops whose
// integer instruction multiplies several rows at once (SMMLA: 2 rows x 2 tokens); each
// (row, token) pair still gets its own 16 lane accumulators, updated in the same order.
template <class Ops, bool Q4, int R, int T>
void int8_tile(const Ops& k, int64_t r, int64_t t0, float* y) {
  const int64_t row_bytes = Q4 ? k.cols / 2 : k.cols;
  const auto* wrow = static_cast<const uint8_t*>(k.w.data) + r * row_bytes;
  const uint16_t* srow = k.w.scales + r * k.groups;
  constexpr int64_t block_bytes = Q4 ? 256 : 512;  // the weights of 16 units
  // log2 of a scale group's weight bytes (a unit is 16 bytes of Q4G, 32 of Q8G): scale byte
  // offset = (weight byte offset >> this) * 2, the scales being one f16 per group, rows alike.
  const int group_bytes_shift = (Q4 ? 4 : 5) + k.group_shift;
  // prefetch.h: a row longer than the path's bound is prefetched spread, a shorter one as one
  // burst kTrunkPrefetchRows ahead where the path does that.
  const bool spread = row_bytes > Ops::kPrefetchSpreadAbove;
  if constexpr (Ops::kPrefetchBurst) {
    if (!spread && t0 == 0 && r + kTrunkPrefetchRows < k.w.rows) {
      prefetch_range(wrow + kTrunkPrefetchRows * row_bytes, R * row_bytes);
      prefetch_range(srow + kTrunkPrefetchRows * k.groups, R * k.groups * 2);
    }
  }
  constexpr int shift = Q4 ? Ops::kQ4Shift : Ops::kQ8Shift;
  typename Ops::F acc[R][T];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[i][t] = Ops::fzero();
  for (int64_t u0 = 0; u0 < k.units; u0 += 16) {
    if constexpr (Ops::kPrefetchSpreadAbove != kTrunkPrefetchSpreadNever) {
      // The weights and scales kTrunkPrefetchBytes ahead of this block in their streams
      // (rows lie end to end, so past the row's end this is a later row's start).
      if (spread && t0 == 0) {
        const int64_t ahead = (u0 >> 4) * block_bytes + kTrunkPrefetchBytes;
#pragma GCC unroll 2
        for (int i = 0; i < R; ++i) {
          prefetch_lines<block_bytes>(wrow, i * row_bytes + ahead);
          prefetch_lines<64>(srow, i * k.groups * 2 + ((ahead >> group_bytes_shift) << 1));
        }
      }
    }
    typename Ops::I s[R][T];
    if constexpr (R == 1) {
      if constexpr (Q4) k.template q4g_sums<T>(wrow, t0, u0, s[0]);
      else k.template q8g_sums<T>(reinterpret_cast<const int8_t*>(wrow), t0, u0, s[0]);
    } else {
      if constexpr (Q4) k.template q4g_sums_rows<R, T>(wrow, row_bytes, t0, u0, s);
      else k.template q8g_sums_rows<R, T>(reinterpret_cast<const int8_t*>(wrow), row_bytes, t0, u0, s);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const typename Ops::F ws = k.unit_scales(srow + i * k.groups, u0);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int64_t at = (t0 + t) * k.padded_units + u0;
        typename Ops::I usum = s[i][t];
        if constexpr (shift > 0) usum = Ops::sub_shifted(usum, k.unit_sum + at, shift);
        const typename Ops::F d = Ops::mul(ws, Ops::load_f(k.unit_scale + at));
        acc[i][t] = Ops::fma(Ops::cvt(usum), d, acc[i][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) y[(t0 + t) * k.w.rows + r + i] = Ops::lane_tree(acc[i][t]);
}

template <class Ops, int R, int T>
void int8_rows(const Ops& k, int64_t r, int64_t t0, float* y) {
  if (k.w.format == TensorFormat::Q4G) int8_tile<Ops, true, R, T>(k, r, t0, y);
  else int8_tile<Ops, false, R, T>(k, r, t0, y);
}

// Rows [r, r + R) for every token, kTokenTile tokens per pass.
template <class Ops, int R>
void int8_row_tile(const Ops& k, int64_t r, int64_t n, float* y) {
  for (int64_t t0 = 0; t0 < n; t0 += Ops::kTokenTile) {
    switch (std::min<int64_t>(Ops::kTokenTile, n - t0)) {
      case 4: if constexpr (Ops::kTokenTile >= 4) int8_rows<Ops, R, 4>(k, r, t0, y); break;
      case 3: if constexpr (Ops::kTokenTile >= 3) int8_rows<Ops, R, 3>(k, r, t0, y); break;
      case 2: if constexpr (Ops::kTokenTile >= 2) int8_rows<Ops, R, 2>(k, r, t0, y); break;
      default: int8_rows<Ops, R, 1>(k, r, t0, y); break;
    }
  }
}

template <class Ops>
void matmul_int8(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  static_assert(Ops::kTokenTile >= 1 && Ops::kTokenTile <= 4, "token tiles of 1 to 4");
  static_assert(Ops::kRowTile == 1 || Ops::kRowTile == 2, "row tiles of 1 or 2");
  const Int8Activations& act = quantize_for(
      w, x, n, w.format == TensorFormat::Q4G ? Int8Layout::EvenOdd : Int8Layout::Natural, Ops::quantize_units, pool);
  const Ops k(w, act);
  // Rows outermost: a row (tile) is read from memory once and stays in L1 for every token
  // tile. for_row_ranges hands out multiples of 4 rows, so only the last range has a row
  // left over from the row tiles; it runs alone (R = 1).
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t row_begin, int64_t row_end) {
    int64_t r = row_begin;
    if constexpr (Ops::kRowTile > 1)
      for (; r + Ops::kRowTile <= row_end; r += Ops::kRowTile) int8_row_tile<Ops, Ops::kRowTile>(k, r, n, y);
    for (; r < row_end; ++r) int8_row_tile<Ops, 1>(k, r, n, y);
  });
}

}  // namespace
}  // namespace waste::kernel_detail
