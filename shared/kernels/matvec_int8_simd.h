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
// vpdpbusd, Q8G with flipped sign bits), their reduction to one sum per unit, the gather of
// the f16 weight scales, and the 16-lane float block (two ymm or one zmm).
//
// Ops provides: F / I (16 f32 / int32 lanes), fzero(), load_f(p), cvt(I), mul(F, F),
// fma(a, b, c), sub_shifted(I s, p, shift) = s - (16 int32 at p) << shift, lane_tree(F),
// kTokenTile (tokens per pass over a row, 1..4), kPrefetch, kQ4Shift, kQ8Shift, and as
// members (over Int8Shape): unit_scales(srow, u0) -> F, and
// q4g_sums<T>(wrow, t0, u0, I* out) / q8g_sums<T>(...) -> the integer sums of units
// [u0, u0 + 16) for tokens t0 .. t0+T (excess included).
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

  Int8Shape(const MatrixView& w_, const Int8Activations& a)
      : w(w_), act(a), groups(w_.cols / w_.group), units_per_group(w_.group / 32), units(a.units),
        padded_units(a.padded_units), cols(w_.cols), group_shift(__builtin_ctzll(uint64_t(w_.group / 32))),
        q(a.q.data()), unit_sum(a.unit_sum.data()), unit_scale(a.unit_scale.data()) {}
};

// Row r for tokens t0 .. t0+T of a Q4G (Q4) or Q8G matrix.
template <class Ops, bool Q4, int T>
void int8_row(const Ops& k, int64_t r, int64_t t0, float* y) {
  const int64_t row_bytes = Q4 ? k.cols / 2 : k.cols;
  const auto* wrow = static_cast<const uint8_t*>(k.w.data) + r * row_bytes;
  const uint16_t* srow = k.w.scales + r * k.groups;
  if constexpr (Ops::kPrefetch) {
    if (t0 == 0 && r + kTrunkPrefetchRows < k.w.rows) {
      prefetch_range(wrow + kTrunkPrefetchRows * row_bytes, row_bytes);
      prefetch_range(srow + kTrunkPrefetchRows * k.groups, k.groups * 2);
    }
  }
  constexpr int shift = Q4 ? Ops::kQ4Shift : Ops::kQ8Shift;
  typename Ops::F acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = Ops::fzero();
  for (int64_t u0 = 0; u0 < k.units; u0 += 16) {
    typename Ops::I s[T];
    if constexpr (Q4) k.template q4g_sums<T>(wrow, t0, u0, s);
    else k.template q8g_sums<T>(reinterpret_cast<const int8_t*>(wrow), t0, u0, s);
    const typename Ops::F ws = k.unit_scales(srow, u0);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int64_t at = (t0 + t) * k.padded_units + u0;
      typename Ops::I usum = s[t];
      if constexpr (shift > 0) usum = Ops::sub_shifted(usum, k.unit_sum + at, shift);
      const typename Ops::F d = Ops::mul(ws, Ops::load_f(k.unit_scale + at));
      acc[t] = Ops::fma(Ops::cvt(usum), d, acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) y[(t0 + t) * k.w.rows + r] = Ops::lane_tree(acc[t]);
}

template <class Ops, int T>
void int8_rows(const Ops& k, int64_t r, int64_t t0, float* y) {
  if (k.w.format == TensorFormat::Q4G) int8_row<Ops, true, T>(k, r, t0, y);
  else int8_row<Ops, false, T>(k, r, t0, y);
}

template <class Ops>
void matmul_int8(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  static_assert(Ops::kTokenTile >= 1 && Ops::kTokenTile <= 4, "token tiles of 1 to 4");
  const Int8Activations& act =
      quantize_for(w, x, n, w.format == TensorFormat::Q4G ? Int8Layout::EvenOdd : Int8Layout::Natural);
  const Ops k(w, act);
  // Rows outermost: a row is read from memory once and stays in L1 for every token tile.
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t r = row_begin; r < row_end; ++r)
      for (int64_t t0 = 0; t0 < n; t0 += Ops::kTokenTile) {
        switch (std::min<int64_t>(Ops::kTokenTile, n - t0)) {
          case 4: if constexpr (Ops::kTokenTile >= 4) int8_rows<Ops, 4>(k, r, t0, y); break;
          case 3: if constexpr (Ops::kTokenTile >= 3) int8_rows<Ops, 3>(k, r, t0, y); break;
          case 2: if constexpr (Ops::kTokenTile >= 2) int8_rows<Ops, 2>(k, r, t0, y); break;
          default: int8_rows<Ops, 1>(k, r, t0, y); break;
        }
      }
  });
}

}  // namespace
}  // namespace waste::kernel_detail
