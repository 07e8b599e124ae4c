// AVX2 (+FMA, F16C) trunk matvec/matmul: 8 f32 lanes, 4-row tiles for one token and
// 2-row x 4-token tiles for several (16 ymm registers). Weights are decoded to exact f32
// values as on the AVX-512 path.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "shared/kernels/matvec_paths.h"
#include "shared/kernels/matvec_tiles.h"

namespace waste {
namespace {

__m256i tail_mask(int n) {
  alignas(32) static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ones + 8 - n));
}

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_tail(const float* p, int n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

// Up to 8 16-bit values, zero-filled, so a tail never reads past the row.
__m128i load_u16_tail(const uint16_t* p, int n) {
  uint16_t buf[8] = {};
  std::memcpy(buf, p, size_t(n) * 2);
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf));
}

// Float formats: blocks of kColumnBlock columns play the part of groups; the columns after
// the last whole block are the tail.
struct FloatShape {
  int64_t groups, group_cols = kernel_detail::kColumnBlock, tail;
  explicit FloatShape(int64_t cols)
      : groups(cols / kernel_detail::kColumnBlock), tail(cols % kernel_detail::kColumnBlock) {}
};

struct F32Rows : FloatShape {
  static constexpr int kCols = 8, kVecs = 1;
  const float* data;
  int64_t cols;
  F32Rows(const MatrixView& w) : FloatShape(w.cols), data(static_cast<const float*>(w.data)), cols(w.cols) {}
  struct Row { const float* p; };
  Row row(int64_t r) const { return {data + r * cols}; }
  void start_group(Row&, int64_t) const {}
  void load(const Row& row, int64_t c, __m256* w) const { w[0] = _mm256_loadu_ps(row.p + c); }
  void load_tail(const Row& row, int64_t c, int n, __m256* w) const { w[0] = _mm256_maskload_ps(row.p + c, tail_mask(n)); }
};

// bf16 is the top half of an f32: widen to 32 bits and shift left.
struct Bf16Rows : FloatShape {
  static constexpr int kCols = 8, kVecs = 1;
  const uint16_t* data;
  int64_t cols;
  Bf16Rows(const MatrixView& w) : FloatShape(w.cols), data(static_cast<const uint16_t*>(w.data)), cols(w.cols) {}
  struct Row { const uint16_t* p; };
  Row row(int64_t r) const { return {data + r * cols}; }
  void start_group(Row&, int64_t) const {}
  static __m256 widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  void load(const Row& row, int64_t c, __m256* w) const {
    w[0] = widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.p + c)));
  }
  void load_tail(const Row& row, int64_t c, int n, __m256* w) const { w[0] = widen(load_u16_tail(row.p + c, n)); }
};

struct F16Rows : FloatShape {
  static constexpr int kCols = 8, kVecs = 1;
  const uint16_t* data;
  int64_t cols;
  F16Rows(const MatrixView& w) : FloatShape(w.cols), data(static_cast<const uint16_t*>(w.data)), cols(w.cols) {}
  struct Row { const uint16_t* p; };
  Row row(int64_t r) const { return {data + r * cols}; }
  void start_group(Row&, int64_t) const {}
  void load(const Row& row, int64_t c, __m256* w) const {
    w[0] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.p + c)));
  }
  void load_tail(const Row& row, int64_t c, int n, __m256* w) const { w[0] = _mm256_cvtph_ps(load_u16_tail(row.p + c, n)); }
};

// Q8G: 8 int8 -> f32, times the group's scale.
struct Q8gRows {
  static constexpr int kCols = 8, kVecs = 1;
  const int8_t* data;
  const uint16_t* scales;
  int64_t cols, groups, group_cols, tail = 0;
  Q8gRows(const MatrixView& w)
      : data(static_cast<const int8_t*>(w.data)), scales(w.scales), cols(w.cols), groups(w.cols / w.group), group_cols(w.group) {}
  struct Row { const int8_t* q; const uint16_t* s; __m256 scale; };
  Row row(int64_t r) const { return {data + r * cols, scales + r * groups, _mm256_setzero_ps()}; }
  void start_group(Row& row, int64_t g) const { row.scale = _mm256_set1_ps(_cvtsh_ss(row.s[g])); }
  void load(const Row& row, int64_t c, __m256* w) const {
    __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row.q + c)));
    w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(q), row.scale);
  }
  void load_tail(const Row&, int64_t, int, __m256* w) const { w[0] = _mm256_setzero_ps(); }  // never called: no tail
};

// Q4G: 16 bytes hold 32 columns. Each group of 8 bytes is widened to 32-bit lanes; the low
// nibbles (even columns) and high nibbles (odd columns) become nibble*s - 8s, which is exact
// (the true (nibble-8)*s fits in an f32), so it equals the scalar dequantization.
struct Q4gRows {
  static constexpr int kCols = 32, kVecs = 4;
  const uint8_t* data;
  const uint16_t* scales;
  int64_t cols, groups, group_cols, tail = 0;
  Q4gRows(const MatrixView& w)
      : data(static_cast<const uint8_t*>(w.data)), scales(w.scales), cols(w.cols), groups(w.cols / w.group), group_cols(w.group) {}
  struct Row { const uint8_t* q; const uint16_t* s; __m256 scale, offset; };
  Row row(int64_t r) const { return {data + r * cols / 2, scales + r * groups, _mm256_setzero_ps(), _mm256_setzero_ps()}; }
  void start_group(Row& row, int64_t g) const {
    const float s = _cvtsh_ss(row.s[g]);
    row.scale = _mm256_set1_ps(s);
    row.offset = _mm256_set1_ps(-8.0f * s);
  }
  void load(const Row& row, int64_t c, __m256* w) const {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row.q + c / 2));
    const __m256i nib = _mm256_set1_epi32(15);
    const __m256i b0 = _mm256_cvtepu8_epi32(bytes);
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b0, nib)), row.scale, row.offset);
    w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b1, nib)), row.scale, row.offset);
    w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)), row.scale, row.offset);
    w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)), row.scale, row.offset);
  }
  void load_tail(const Row&, int64_t, int, __m256* w) const { w[0] = _mm256_setzero_ps(); }  // never called: no tail
};

template <class D>
void run(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const D d(w);
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t b, int64_t e) {
    if (n == 1)
      kernel_detail::run_rows<Avx2, D, 4, 1>(d, x, n, w.cols, y, w.rows, b, e);
    else
      kernel_detail::run_rows<Avx2, D, 2, 4>(d, x, n, w.cols, y, w.rows, b, e);
  });
}

}  // namespace

void matmul_avx2(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
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
