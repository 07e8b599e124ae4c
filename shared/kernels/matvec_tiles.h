// Internal: the row x token tiling shared by the SIMD matvec paths. Include only from
// *_avx2.cpp / *_avx512.cpp files: it is a template over an instruction set `Isa` and a row
// decoder `D`, both defined in the including file's anonymous namespace, so every path gets
// its own instantiation and the scalar build never sees SIMD code.
//
// Isa provides: V (vector of kLanes floats), zero(), load(p), load_tail(p, n) (first n
// lanes, rest zero), fma(a, b, c) = a*b + c, sum(v) (fixed-order horizontal add).
// D provides: kCols (columns per chunk = kVecs * kLanes), kVecs, groups (chunks are
// grouped; quantized formats: one scale group, else kColumnBlock columns), group_cols, tail
// (columns after the last full group, float formats only), Row (per-row cursor), row(r),
// start_group(Row&, g), load(Row, c, V* w) (chunk at column c, kVecs vectors in the lane
// order of the activation layout), load_tail(Row, c, n, V* w).
//
// Order of the sum: each (row, token) pair has one vector accumulator that receives, for each
// chunk in column order, the FMAs of its kVecs vectors in order, then the tail; the lanes are
// added by Isa::sum at the end. Accumulators are parked in memory between column blocks
// (exactly), so the result depends on neither the row tile, the token tile, the column
// blocking nor the thread split: matmul equals matvec bit for bit on a path.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace waste::kernel_detail {

// Tokens handled per pass over W, and columns per block (their activations stay in L2).
constexpr int64_t kTokenBlock = 64;
constexpr int64_t kColumnBlock = 512;

// Accumulates rows [r0, r0+R) x tokens [0, T) over groups [g_begin, g_end) (+ the tail if
// with_tail) into acc[r*T + t]. The small loops over rows, tokens and vectors are unrolled
// so the accumulators live in registers.
template <class Isa, class D, int R, int T>
inline void tile(const D& d, int64_t r0, int64_t g_begin, int64_t g_end, bool with_tail, const float* x,
                 int64_t x_stride, typename Isa::V* acc_mem) {
  using V = typename Isa::V;
  V acc[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = acc_mem[r * T + t];
  typename D::Row rows[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) rows[r] = d.row(r0 + r);
  auto chunk = [&](int64_t c) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      V w[D::kVecs];
      d.load(rows[r], c, w);
#pragma GCC unroll 16
      for (int v = 0; v < D::kVecs; ++v)
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t)
          acc[r][t] = Isa::fma(w[v], Isa::load(x + t * x_stride + c + v * Isa::kLanes), acc[r][t]);
    }
  };
  for (int64_t g = g_begin; g < g_end; ++g) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) d.start_group(rows[r], g);
    const int64_t c_end = (g + 1) * d.group_cols;
    for (int64_t c = g * d.group_cols; c < c_end; c += D::kCols) chunk(c);
  }
  // The tail (float formats only): whole chunks, then one zero-padded partial chunk.
  if (with_tail && d.tail > 0) {
    const int64_t tail_begin = d.groups * d.group_cols;
    int64_t c = tail_begin;
    for (; c + D::kCols <= tail_begin + d.tail; c += D::kCols) chunk(c);
    const int left = int(tail_begin + d.tail - c);
    if (left > 0) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        V w[1];
        d.load_tail(rows[r], c, left, w);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) acc[r][t] = Isa::fma(w[0], Isa::load_tail(x + t * x_stride + c, left), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc_mem[r * T + t] = acc[r][t];
}

// One row tile (R rows) against tokens [0, n) of x (row stride cols), y[t*y_stride + row].
template <class Isa, class D, int R, int T>
inline void row_tile(const D& d, int64_t r0, const float* x, int64_t n, int64_t x_stride, float* y,
                     int64_t y_stride, typename Isa::V* acc) {
  static_assert(T >= 1 && T <= 4, "token tiles of 1 to 4");
  using V = typename Isa::V;
  const int64_t block_groups = std::max<int64_t>(1, kColumnBlock / d.group_cols);
  const int64_t tiles = (n + T - 1) / T;
  for (int64_t i = 0; i < tiles * R * T; ++i) acc[i] = Isa::zero();
  const int64_t blocks = std::max<int64_t>(1, (d.groups + block_groups - 1) / block_groups);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t g = b * block_groups;
    const int64_t g_end = std::min(d.groups, g + block_groups);
    const bool last = b + 1 == blocks;
    for (int64_t j = 0; j < tiles; ++j) {
      const int64_t t0 = j * T;
      const float* xt = x + t0 * x_stride;
      V* a = acc + j * R * T;
      const int64_t tn = std::min<int64_t>(T, n - t0);
      if (tn == T) {
        tile<Isa, D, R, T>(d, r0, g, g_end, last, xt, x_stride, a);
      } else if (tn == 1) {
        tile<Isa, D, R, 1>(d, r0, g, g_end, last, xt, x_stride, a);
      } else if (tn == 2) {
        if constexpr (T > 2) tile<Isa, D, R, 2>(d, r0, g, g_end, last, xt, x_stride, a);
      } else {
        if constexpr (T > 3) tile<Isa, D, R, 3>(d, r0, g, g_end, last, xt, x_stride, a);
      }
    }
  }
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t t0 = j * T;
    const int64_t tn = std::min<int64_t>(T, n - t0);
    for (int r = 0; r < R; ++r)
      for (int64_t t = 0; t < tn; ++t) y[(t0 + t) * y_stride + r0 + r] = Isa::sum(acc[j * R * T + r * tn + t]);
  }
}

// Rows [row_begin, row_end) for n tokens: token blocks outermost so W is read from memory
// once per kTokenBlock tokens; within a block, row tiles of RowTile rows (one row at a time
// for the remainder) and token tiles of TokenTile.
template <class Isa, class D, int RowTile, int TokenTile>
void run_rows(const D& d, const float* x, int64_t n, int64_t cols, float* y, int64_t rows, int64_t row_begin,
              int64_t row_end) {
  using V = typename Isa::V;
  const int64_t block = std::min(n, kTokenBlock);
  const int64_t tiles = (block + TokenTile - 1) / TokenTile;
  // Parked accumulators; a vector of 64-byte slots because std::vector<__m256> drops the
  // type's alignment attribute.
  struct alignas(64) Slot { float f[16]; };
  static_assert(sizeof(V) <= sizeof(Slot));
  std::vector<Slot> slots(size_t(tiles * RowTile * TokenTile));
  V* acc = reinterpret_cast<V*>(slots.data());
  for (int64_t t0 = 0; t0 < n; t0 += kTokenBlock) {
    const int64_t tn = std::min(kTokenBlock, n - t0);
    const float* xb = x + t0 * cols;
    float* yb = y + t0 * rows;
    int64_t r = row_begin;
    for (; r + RowTile <= row_end; r += RowTile)
      row_tile<Isa, D, RowTile, TokenTile>(d, r, xb, tn, cols, yb, rows, acc);
    for (; r < row_end; ++r) row_tile<Isa, D, 1, TokenTile>(d, r, xb, tn, cols, yb, rows, acc);
  }
}

// Q4G stores element 2j in the low nibble and 2j+1 in the high nibble of byte j; the SIMD
// paths decode low and high nibbles into separate vectors, so they use activations reordered
// per 32 columns as [x0 x2 .. x30 | x1 x3 .. x31].
inline void split_even_odd(const float* x, int64_t n, int64_t cols, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* src = x + t * cols;
    float* dst = out + t * cols;
    for (int64_t b = 0; b < cols; b += 32)
      for (int j = 0; j < 16; ++j) {
        dst[b + j] = src[b + 2 * j];
        dst[b + 16 + j] = src[b + 2 * j + 1];
      }
  }
}

}  // namespace waste::kernel_detail
