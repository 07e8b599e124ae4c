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
#include <type_traits>
#include <vector>

namespace waste::kernel_detail {

// Tokens handled per pass over W, and columns per block (their activations stay in L2).
constexpr int64_t kTokenBlock = 64;
constexpr int64_t kColumnBlock = 512;
// Rows sharing one column block of activations when there are several token tiles.
constexpr int64_t kRowBlock = 32;

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

// Rows [row_begin, row_end) for n tokens. Token blocks of kTokenBlock are outermost, so W is
// read from memory once per block. Within a token block, rows go in blocks of `row_block`
// (whole row tiles); within those, column blocks of about kColumnBlock, and inside a column
// block every row tile x token tile. So the activations of one column block (at most
// kTokenBlock x kColumnBlock floats) are reused by all rows of a row block while they are in
// L2. For a single token tile the row block is one row tile (4 long streams over W).
template <class Isa, class D, int RowTile, int TokenTile>
void run_rows(const D& d, const float* x, int64_t n, int64_t cols, float* y, int64_t rows, int64_t row_begin,
              int64_t row_end) {
  static_assert(TokenTile >= 1 && TokenTile <= 4, "token tiles of 1 to 4");
  using V = typename Isa::V;
  constexpr int64_t kTile = RowTile * TokenTile;
  const int64_t row_block = n <= TokenTile ? RowTile : kRowBlock / RowTile * RowTile;
  const int64_t token_tiles = (std::min(n, kTokenBlock) + TokenTile - 1) / TokenTile;
  // Parked accumulators, one slot of kTile vectors per (row tile or leftover row, token
  // tile); a vector of 64-byte slots because std::vector<__m256> drops the alignment.
  struct alignas(64) Slot { float f[16]; };
  static_assert(sizeof(V) <= sizeof(Slot));
  std::vector<Slot> slots(size_t(row_block * token_tiles * kTile));
  V* acc = reinterpret_cast<V*>(slots.data());
  const int64_t block_groups = std::max<int64_t>(1, kColumnBlock / d.group_cols);
  const int64_t col_blocks = std::max<int64_t>(1, (d.groups + block_groups - 1) / block_groups);

  for (int64_t t0 = 0; t0 < n; t0 += kTokenBlock) {
    const int64_t tn = std::min(kTokenBlock, n - t0);
    const int64_t tiles = (tn + TokenTile - 1) / TokenTile;
    const float* xb = x + t0 * cols;
    float* yb = y + t0 * rows;
    for (int64_t rb = row_begin; rb < row_end; rb += row_block) {
      const int64_t re = std::min(row_end, rb + row_block);
      const int64_t full_end = rb + (re - rb) / RowTile * RowTile;
      // Slot index of row r's tile: full tiles by tile number, leftover rows one each after.
      auto slot = [&](int64_t r, int64_t j) {
        const int64_t unit = r < full_end ? (r - rb) / RowTile : (full_end - rb) / RowTile + (r - full_end);
        return acc + (unit * tiles + j) * kTile;
      };
      for (int64_t i = 0; i < (re - rb) * tiles * kTile; ++i) acc[i] = Isa::zero();
      for (int64_t b = 0; b < col_blocks; ++b) {
        const int64_t g = b * block_groups;
        const int64_t g_end = std::min(d.groups, g + block_groups);
        const bool last = b + 1 == col_blocks;
        for (int64_t j = 0; j < tiles; ++j) {
          const float* xt = xb + j * TokenTile * cols;
          const int64_t tt = std::min<int64_t>(TokenTile, tn - j * TokenTile);
          auto run = [&](auto rows_c, int64_t r) {
            constexpr int R = decltype(rows_c)::value;
            V* a = slot(r, j);
            if (tt == TokenTile) tile<Isa, D, R, TokenTile>(d, r, g, g_end, last, xt, cols, a);
            else if (tt == 1) tile<Isa, D, R, 1>(d, r, g, g_end, last, xt, cols, a);
            else if (tt == 2) { if constexpr (TokenTile > 2) tile<Isa, D, R, 2>(d, r, g, g_end, last, xt, cols, a); }
            else { if constexpr (TokenTile > 3) tile<Isa, D, R, 3>(d, r, g, g_end, last, xt, cols, a); }
          };
          for (int64_t r = rb; r < full_end; r += RowTile) run(std::integral_constant<int, RowTile>{}, r);
          for (int64_t r = full_end; r < re; ++r) run(std::integral_constant<int, 1>{}, r);
        }
      }
      // Lanes added once per (row, token); a tile of R rows x tt tokens stores acc[r*tt + t].
      for (int64_t j = 0; j < tiles; ++j) {
        const int64_t tt = std::min<int64_t>(TokenTile, tn - j * TokenTile);
        for (int64_t r = rb; r < re; ++r) {
          const bool in_tile = r < full_end;
          const V* a = slot(in_tile ? rb + (r - rb) / RowTile * RowTile : r, j);
          const int64_t rr = in_tile ? (r - rb) % RowTile : 0;
          for (int64_t t = 0; t < tt; ++t) yb[(j * TokenTile + t) * rows + r] = Isa::sum(a[rr * tt + t]);
        }
      }
    }
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
