// AVX-512 (F, BW, VL) trunk matvec/matmul: 16 f32 lanes, 4-row x 4-token tiles. Weights
// are decoded to exact f32 values (Q8G/Q4G: q * scale is exact in f32, an 8-bit integer
// times an f16), then multiplied with f32 activations.
#include <immintrin.h>

// GCC 12's AVX-512 headers build pass-through operands from _mm512_undefined_*(), a
// self-initialized variable that -Wmaybe-uninitialized flags once inlined; it is not a bug.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <vector>

#include "shared/kernels/matvec_paths.h"
#include "shared/kernels/matvec_tiles.h"

namespace waste {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_tail(const float* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
};

__mmask16 tail_mask(int n) { return __mmask16((1u << n) - 1); }

// Float formats: blocks of kColumnBlock columns play the part of groups; the columns after
// the last whole block are the tail.
struct FloatShape {
  int64_t groups, group_cols = kernel_detail::kColumnBlock, tail;
  explicit FloatShape(int64_t cols)
      : groups(cols / kernel_detail::kColumnBlock), tail(cols % kernel_detail::kColumnBlock) {}
};

struct F32Rows : FloatShape {
  static constexpr int kCols = 16, kVecs = 1;
  const float* data;
  int64_t cols;
  F32Rows(const MatrixView& w) : FloatShape(w.cols), data(static_cast<const float*>(w.data)), cols(w.cols) {}
  struct Row { const float* p; };
  Row row(int64_t r) const { return {data + r * cols}; }
  void start_group(Row&, int64_t) const {}
  void load(const Row& row, int64_t c, __m512* w) const { w[0] = _mm512_loadu_ps(row.p + c); }
  void load_tail(const Row& row, int64_t c, int n, __m512* w) const { w[0] = _mm512_maskz_loadu_ps(tail_mask(n), row.p + c); }
};

// bf16 is the top half of an f32: widen to 32 bits and shift left.
struct Bf16Rows : FloatShape {
  static constexpr int kCols = 16, kVecs = 1;
  const uint16_t* data;
  int64_t cols;
  Bf16Rows(const MatrixView& w) : FloatShape(w.cols), data(static_cast<const uint16_t*>(w.data)), cols(w.cols) {}
  struct Row { const uint16_t* p; };
  Row row(int64_t r) const { return {data + r * cols}; }
  void start_group(Row&, int64_t) const {}
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  void load(const Row& row, int64_t c, __m512* w) const {
    w[0] = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row.p + c)));
  }
  void load_tail(const Row& row, int64_t c, int n, __m512* w) const {
    w[0] = widen(_mm256_maskz_loadu_epi16(tail_mask(n), row.p + c));
  }
};

struct F16Rows : FloatShape {
  static constexpr int kCols = 16, kVecs = 1;
  const uint16_t* data;
  int64_t cols;
  F16Rows(const MatrixView& w) : FloatShape(w.cols), data(static_cast<const uint16_t*>(w.data)), cols(w.cols) {}
  struct Row { const uint16_t* p; };
  Row row(int64_t r) const { return {data + r * cols}; }
  void start_group(Row&, int64_t) const {}
  void load(const Row& row, int64_t c, __m512* w) const {
    w[0] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row.p + c)));
  }
  void load_tail(const Row& row, int64_t c, int n, __m512* w) const {
    w[0] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), row.p + c));
  }
};

// Q8G: 16 int8 -> f32, times the group's scale.
struct Q8gRows {
  static constexpr int kCols = 16, kVecs = 1;
  const int8_t* data;
  const uint16_t* scales;
  int64_t cols, groups, group_cols, tail = 0;
  Q8gRows(const MatrixView& w)
      : data(static_cast<const int8_t*>(w.data)), scales(w.scales), cols(w.cols), groups(w.cols / w.group), group_cols(w.group) {}
  struct Row { const int8_t* q; const uint16_t* s; __m512 scale; };
  Row row(int64_t r) const { return {data + r * cols, scales + r * groups, _mm512_setzero_ps()}; }
  void start_group(Row& row, int64_t g) const { row.scale = _mm512_set1_ps(_cvtsh_ss(row.s[g])); }
  void load(const Row& row, int64_t c, __m512* w) const {
    __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.q + c)));
    w[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(q), row.scale);
  }
  void load_tail(const Row&, int64_t, int, __m512* w) const { w[0] = _mm512_setzero_ps(); }  // never called: no tail
};

// Q4G: 16 bytes hold 32 columns; each byte widened to a 32-bit lane indexes a 16-entry table
// of (nibble - 8) * scale with its low nibble (vpermps reads only the low 4 bits), then with
// its high nibble after a shift. Low nibbles are the even columns, high the odd ones.
struct Q4gRows {
  static constexpr int kCols = 32, kVecs = 2;
  const uint8_t* data;
  const uint16_t* scales;
  int64_t cols, groups, group_cols, tail = 0;
  __m512 levels;
  Q4gRows(const MatrixView& w)
      : data(static_cast<const uint8_t*>(w.data)), scales(w.scales), cols(w.cols), groups(w.cols / w.group), group_cols(w.group),
        levels(_mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7)) {}
  struct Row { const uint8_t* q; const uint16_t* s; __m512 table; };
  Row row(int64_t r) const { return {data + r * cols / 2, scales + r * groups, _mm512_setzero_ps()}; }
  void start_group(Row& row, int64_t g) const { row.table = _mm512_mul_ps(levels, _mm512_set1_ps(_cvtsh_ss(row.s[g]))); }
  void load(const Row& row, int64_t c, __m512* w) const {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.q + c / 2)));
    w[0] = _mm512_permutexvar_ps(b, row.table);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), row.table);
  }
  void load_tail(const Row&, int64_t, int, __m512* w) const { w[0] = _mm512_setzero_ps(); }  // never called: no tail
};

template <class D>
void run(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const D d(w);
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t b, int64_t e) {
    if (n == 1)
      kernel_detail::run_rows<Avx512, D, 4, 1>(d, x, n, w.cols, y, w.rows, b, e);
    else
      kernel_detail::run_rows<Avx512, D, 4, 4>(d, x, n, w.cols, y, w.rows, b, e);
  });
}

}  // namespace

void matmul_avx512(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  switch (w.format) {
    case TensorFormat::F32: return run<F32Rows>(w, x, n, y, pool);
    case TensorFormat::BF16: return run<Bf16Rows>(w, x, n, y, pool);
    case TensorFormat::F16: return run<F16Rows>(w, x, n, y, pool);
    case TensorFormat::Q8G: return run<Q8gRows>(w, x, n, y, pool);
    case TensorFormat::Q4G: {
      std::vector<float> split(size_t(n * w.cols));
      kernel_detail::split_even_odd(x, n, w.cols, split.data());
      return run<Q4gRows>(w, split.data(), n, y, pool);
    }
    case TensorFormat::VQ3R: break;
  }
  matmul_scalar(w, x, n, y, pool);
}

}  // namespace waste
