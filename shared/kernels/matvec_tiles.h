// Internal: the trunk matvec/matmul of the SIMD paths, written once over an instruction set
// `Isa` (shared/kernels/simd_traits.h); matvec_avx2.cpp and matvec_avx512.cpp only
// instantiate matmul<Isa, ...>() with their tile shapes. Include only from those per-ISA
// files (everything here has internal linkage, see simd_traits.h), so every path gets its
// own instantiation and the scalar build never sees SIMD code.
//
// Isa provides (simd_traits.h): V (vector of kLanes floats), zero(), load(p), load_tail(p, n)
// (first n lanes, rest zero), fma(a, b, c) = a*b + c, sum(v) (fixed-order horizontal add),
// and the exact widening loads the row decoders below use.
// A row decoder D provides: kCols (columns per chunk = kVecs * kLanes), kVecs, groups
// (chunks are grouped; quantized formats: one scale group, else kColumnBlock columns),
// group_cols, tail (columns after the last full group, float formats only), Row (per-row
// cursor), row(r), start_group(Row&, g), load(Row, c, V* w) (chunk at column c, kVecs vectors
// in the lane order of the activation layout), load_tail(Row, c, n, V* w).
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

#include "shared/kernels/matvec_paths.h"

namespace waste::kernel_detail {
namespace {

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

// Weights are decoded to exact f32 values (Q8G/Q4G: q * scale is exact in f32, an 8-bit
// integer times an f16), then multiplied with f32 activations.

// Float formats: blocks of kColumnBlock columns play the part of groups; the columns after
// the last whole block are the tail.
struct FloatShape {
  int64_t groups, group_cols = kColumnBlock, tail;
  explicit FloatShape(int64_t cols) : groups(cols / kColumnBlock), tail(cols % kColumnBlock) {}
};

// F32, BF16 and F16 rows: one vector per chunk, widened exactly by Isa (Load).
template <class Isa, class T, class Load>
struct FloatRows : FloatShape {
  using V = typename Isa::V;
  static constexpr int kCols = Isa::kLanes, kVecs = 1;
  const T* data;
  int64_t cols;
  FloatRows(const MatrixView& w) : FloatShape(w.cols), data(static_cast<const T*>(w.data)), cols(w.cols) {}
  struct Row { const T* p; };
  Row row(int64_t r) const { return {data + r * cols}; }
  void start_group(Row&, int64_t) const {}
  void load(const Row& row, int64_t c, V* w) const { w[0] = Load::full(row.p + c); }
  void load_tail(const Row& row, int64_t c, int n, V* w) const { w[0] = Load::tail(row.p + c, n); }
};
template <class Isa> struct LoadF32 {
  static auto full(const float* p) { return Isa::load(p); }
  static auto tail(const float* p, int n) { return Isa::load_tail(p, n); }
};
template <class Isa> struct LoadBf16 {
  static auto full(const uint16_t* p) { return Isa::load_bf16(p); }
  static auto tail(const uint16_t* p, int n) { return Isa::load_bf16_tail(p, n); }
};
template <class Isa> struct LoadF16 {
  static auto full(const uint16_t* p) { return Isa::load_f16(p); }
  static auto tail(const uint16_t* p, int n) { return Isa::load_f16_tail(p, n); }
};

// Q8G: kLanes int8 -> f32, times the group's scale.
template <class Isa>
struct Q8gRows {
  using V = typename Isa::V;
  static constexpr int kCols = Isa::kLanes, kVecs = 1;
  const int8_t* data;
  const uint16_t* scales;
  int64_t cols, groups, group_cols, tail = 0;
  Q8gRows(const MatrixView& w)
      : data(static_cast<const int8_t*>(w.data)), scales(w.scales), cols(w.cols), groups(w.cols / w.group), group_cols(w.group) {}
  struct Row { const int8_t* q; const uint16_t* s; V scale; };
  Row row(int64_t r) const { return {data + r * cols, scales + r * groups, Isa::zero()}; }
  void start_group(Row& row, int64_t g) const { row.scale = Isa::set1(Isa::f16(row.s[g])); }
  void load(const Row& row, int64_t c, V* w) const { w[0] = Isa::mul(Isa::load_i8(row.q + c), row.scale); }
  void load_tail(const Row&, int64_t, int, V* w) const { w[0] = Isa::zero(); }  // never called: no tail
};

// Q4G: 16 bytes hold 32 columns, decoded by Isa::q4_decode into 32 / kLanes vectors (low
// nibbles, the even columns, then high nibbles, the odd ones: the split_even_odd layout).
template <class Isa>
struct Q4gRows {
  using V = typename Isa::V;
  static constexpr int kCols = 32, kVecs = 32 / Isa::kLanes;
  const uint8_t* data;
  const uint16_t* scales;
  int64_t cols, groups, group_cols, tail = 0;
  Q4gRows(const MatrixView& w)
      : data(static_cast<const uint8_t*>(w.data)), scales(w.scales), cols(w.cols), groups(w.cols / w.group), group_cols(w.group) {}
  struct Row { const uint8_t* q; const uint16_t* s; typename Isa::Q4Scale scale; };
  Row row(int64_t r) const { return {data + r * cols / 2, scales + r * groups, Isa::q4_scale(0.0f)}; }
  // (the scale is set by start_group before any load)
  void start_group(Row& row, int64_t g) const { row.scale = Isa::q4_scale(Isa::f16(row.s[g])); }
  void load(const Row& row, int64_t c, V* w) const { Isa::q4_decode(row.q + c / 2, row.scale, w); }
  void load_tail(const Row&, int64_t, int, V* w) const { w[0] = Isa::zero(); }  // never called: no tail
};

template <class Isa, class D, int RowTile1, int RowTileN, int TokenTileN>
void run(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const D d(w);
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t b, int64_t e) {
    if (n == 1)
      run_rows<Isa, D, RowTile1, 1>(d, x, n, w.cols, y, w.rows, b, e);
    else
      run_rows<Isa, D, RowTileN, TokenTileN>(d, x, n, w.cols, y, w.rows, b, e);
  });
}

// matmul_<isa>(): row tiles of RowTile1 rows for one token, RowTileN x TokenTileN tiles for
// several (the ISA's register count decides them). VQ3R is not a trunk format here.
template <class Isa, int RowTile1, int RowTileN, int TokenTileN>
void matmul(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  switch (w.format) {
    case TensorFormat::F32:
      return run<Isa, FloatRows<Isa, float, LoadF32<Isa>>, RowTile1, RowTileN, TokenTileN>(w, x, n, y, pool);
    case TensorFormat::BF16:
      return run<Isa, FloatRows<Isa, uint16_t, LoadBf16<Isa>>, RowTile1, RowTileN, TokenTileN>(w, x, n, y, pool);
    case TensorFormat::F16:
      return run<Isa, FloatRows<Isa, uint16_t, LoadF16<Isa>>, RowTile1, RowTileN, TokenTileN>(w, x, n, y, pool);
    case TensorFormat::Q8G: return run<Isa, Q8gRows<Isa>, RowTile1, RowTileN, TokenTileN>(w, x, n, y, pool);
    case TensorFormat::Q4G: {
      std::vector<float> split(size_t(n * w.cols));
      split_even_odd(x, n, w.cols, split.data());
      return run<Isa, Q4gRows<Isa>, RowTile1, RowTileN, TokenTileN>(w, split.data(), n, y, pool);
    }
    case TensorFormat::VQ3R: break;
  }
  matmul_scalar(w, x, n, y, pool);
}

}  // namespace
}  // namespace waste::kernel_detail
