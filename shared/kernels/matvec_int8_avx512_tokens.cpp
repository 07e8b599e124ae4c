// AVX-512 VNNI Q4G matmul for many tokens (a prefill chunk): the same bits as the
// definition in matvec_int8.h, computed with the tokens in the vector lanes.
//
// Why: the row-lane path (matvec_int8_avx512.cpp) gets 16 unit sums of one (row, token) by
// reducing four vectors of partial sums (reduce_units), and for a prefill chunk that reduce,
// the scale gather and the activation loads cost about as much as the vpdpbusd themselves.
// Here a zmm holds 16 tokens: vpdpbusd multiplies 4 activation bytes of each token by 4
// weight bytes of the row broadcast to every lane, so 8 of them give the exact sum of one
// unit (32 columns) for 16 tokens, with nothing to reduce. Each unit's sum then takes the
// definition's float steps in the definition's order, per token lane:
//   a[k % 16] = fma(float(usum_k), float(weight scale) * xs_k, a[k % 16])
// followed by the fixed lane tree, so every path still gives the same bits.
//
// Signs: vpdpbusd multiplies unsigned by signed bytes. The broadcast operand (the weights) is
// the signed one (nibble - 8) and the activations enter as unsigned q + 128; the excess,
// 128 times the unit's weight sum, is subtracted from the integer sum (exact).
//
// Layouts. Activations come quantized in the EvenOdd layout (matvec_int8.h): per 128 columns
// the 64 even columns, then the 64 odd ones. A Q4G row holds 16 bytes a unit: the low nibble
// of byte i is column 2i, the high nibble column 2i + 1. So the low nibbles of bytes 4j..4j+3
// and the even activations 4j..4j+3 of the unit are the same four columns, and likewise the
// high nibbles and the odd activations: dword j (0-3) of a unit pairs low nibbles with evens,
// dword 4 + j high nibbles with odds.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "shared/kernels/matvec_int8.h"
#include "shared/kernels/matvec_int8_tokens.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/half.h"

namespace waste {
namespace {

constexpr int kLanes = 16;          // tokens per block (one zmm of int32 / f32)
constexpr int kDwordsPerUnit = 8;   // 32 columns = 8 groups of 4 bytes
constexpr int kUnitLanes = 16;      // the definition's lane accumulators (unit k -> k % 16)
// Rows sharing each activation load: a block's activations (36 KiB on a 2304-wide matrix)
// stream from L2 once per pass. waste-bench-trunk, 128 tokens, 1 thread, against the row-lane
// kernel: 2 rows 1.24x, 4 rows 1.79x, 8 rows 1.86x (2026-12-05).
// One of the definition's lane accumulators per row at a time: the 8 rows are 8 independent
// fma chains and 16 integer ones already (R x 2 + R registers of the 32; two lanes a row at 4
// rows measured below 8 rows with one).
constexpr int kRowsPerPass = 8;

// One block of 16 tokens, rearranged for the token-lane products.
struct TokenBlock {
  // [unit][dword][token lane] 4 bytes each: q + 128 of the unit's 4 columns of that dword.
  const uint8_t* a;
  // [unit][token lane]: xs of the unit (0 for a lane past the last token).
  const float* xs;
  int tokens;  // valid lanes
};

// Where unit u's evens and odds start in an EvenOdd-ordered token of `cols` columns.
inline void even_odd_offsets(int64_t u, int64_t cols, int64_t& even, int64_t& odd) {
  const int64_t block = (u / 4) * 128;
  const int64_t in_block = std::min<int64_t>(128, cols - block) / 32;  // units in this block
  even = block + 16 * (u % 4);
  odd = block + 16 * in_block + 16 * (u % 4);
}

// The tokens of all blocks in the token-lane layout; lanes past n hold q = 0 and xs = 0.
void arrange_tokens(const Int8Activations& act, std::vector<uint8_t>& a, std::vector<float>& xs) {
  const int64_t n = act.n, cols = act.cols, units = act.units;
  const int64_t blocks = (n + kLanes - 1) / kLanes;
  a.assign(size_t(blocks * units * kDwordsPerUnit * kLanes * 4), 0x80);
  xs.assign(size_t(blocks * units * kLanes), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t b = t / kLanes, lane = t % kLanes;
    const int8_t* qt = act.q.data() + t * cols;
    for (int64_t u = 0; u < units; ++u) {
      int64_t even, odd;
      even_odd_offsets(u, cols, even, odd);
      uint8_t* dst = a.data() + size_t(((b * units + u) * kDwordsPerUnit) * kLanes * 4);
      for (int j = 0; j < kDwordsPerUnit; ++j) {
        const int8_t* src = qt + (j < 4 ? even + 4 * j : odd + 4 * (j - 4));
        uint32_t v;
        std::memcpy(&v, src, 4);
        v ^= 0x80808080u;  // q + 128 per byte
        std::memcpy(dst + size_t(j * kLanes + lane) * 4, &v, 4);
      }
      xs[size_t((b * units + u) * kLanes + lane)] = act.unit_scale[size_t(t * act.padded_units + u)];
    }
  }
}

// A row's weights as signed bytes, [unit][low nibbles 16 | high nibbles 16], and per unit
// 128 times its weight sum (the excess the unsigned activations add) and its weight scale
// as f32 (converted once per row, not once per token block).
void widen_row(const uint8_t* wrow, const uint16_t* srow, int64_t units, int group_shift, int8_t* wb, int32_t* excess,
               float* unit_scale) {
  if (group_shift == 0) {  // a scale per unit: 16 at a time
    for (int64_t u = 0; u < units; u += 16) {
      const __mmask16 m16 = units - u >= 16 ? __mmask16(0xffff) : __mmask16((1u << (units - u)) - 1);
      _mm512_mask_storeu_ps(unit_scale + u, m16, _mm512_maskz_cvtph_ps(m16, _mm256_maskz_loadu_epi16(m16, srow + u)));
    }
  } else {
    for (int64_t u = 0; u < units; ++u) unit_scale[u] = f16_to_f32(srow[u >> group_shift]);
  }
  const __m512i nib = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  const __m512i zero = _mm512_setzero_si512();
  // (The maskz forms of cvtph_ps, shuffle_epi32, cvtepi64_epi32 and cvtepi32_ps below, with
  // every lane set: the plain ones trip gcc 12's -Wmaybe-uninitialized on their undefined source.)
  const __m128i bias = _mm_set1_epi32(8 * 32);
  for (int64_t u0 = 0; u0 < units; u0 += 4) {
    const int64_t m = std::min<int64_t>(4, units - u0);
    const __mmask64 mask = m == 4 ? ~__mmask64(0) : (__mmask64(1) << (16 * m)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(mask, wrow + u0 * 16);
    const __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
    // Units u0, u0+1 then u0+2, u0+3, each as its 16 low then 16 high nibbles.
    const __m512i p0 = _mm512_permutex2var_epi64(lo, first, hi), p1 = _mm512_permutex2var_epi64(lo, second, hi);
    int8_t* dst = wb + u0 * 32;
    _mm512_mask_storeu_epi8(dst, m >= 2 ? ~__mmask64(0) : (__mmask64(1) << 32) - 1, _mm512_sub_epi8(p0, eight));
    if (m > 2) _mm512_mask_storeu_epi8(dst + 64, m == 4 ? ~__mmask64(0) : (__mmask64(1) << 32) - 1, _mm512_sub_epi8(p1, eight));
    // Nibble sums: qwords 2i, 2i+1 of sad(lo) + sad(hi) hold unit u0+i's 16 low and 16 high
    // nibbles in two halves; adjacent qwords added, the even ones compressed to 4 units.
    __m512i t = _mm512_add_epi64(_mm512_sad_epu8(lo, zero), _mm512_sad_epu8(hi, zero));
    t = _mm512_add_epi64(t, _mm512_maskz_shuffle_epi32(0xffff, t, _MM_PERM_BADC));  // swap the qwords of each pair
    const __m128i sums = _mm256_castsi256_si128(_mm512_maskz_cvtepi64_epi32(0xff, _mm512_maskz_compress_epi64(0x55, t)));
    const __m128i ex = _mm_slli_epi32(_mm_sub_epi32(sums, bias), 7);  // 128 x (sum - 8 x 32)
    _mm_mask_storeu_epi32(excess + u0, __mmask8((1u << m) - 1), ex);
  }
}

// Rows r .. r+R (R = 1 .. 8) for one block of tokens. acc scratch: [R][16 lanes][16 tokens].
template <int R>
void rows_block(const MatrixView& w, int64_t units, const int8_t* const* wb, const int32_t* const* excess,
                const float* const* wscale, const TokenBlock& tb, float* acc, int64_t r, float* y) {
  // One of the definition's lanes at a time (units kk, kk + 16, ... in order), for every row.
  for (int kk = 0; kk < kUnitLanes; ++kk) {
    __m512 a[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) a[i] = _mm512_setzero_ps();
    for (int64_t k = kk; k < units; k += kUnitLanes) {
      const uint8_t* ak = tb.a + size_t(k * kDwordsPerUnit * kLanes * 4);
      __m512i s[R][2];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) s[i][0] = s[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int j = 0; j < kDwordsPerUnit; ++j) {
        const __m512i av = _mm512_loadu_si512(ak + j * kLanes * 4);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          int32_t wd;
          std::memcpy(&wd, wb[i] + k * 32 + 4 * j, 4);
          s[i][j & 1] = _mm512_dpbusd_epi32(s[i][j & 1], av, _mm512_set1_epi32(wd));
        }
      }
      const __m512 xs = _mm512_loadu_ps(tb.xs + k * kLanes);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512i usum = _mm512_sub_epi32(_mm512_add_epi32(s[i][0], s[i][1]), _mm512_set1_epi32(excess[i][k]));
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(wscale[i][k]), xs);
        a[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, usum), d, a[i]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) _mm512_store_ps(acc + (i * kUnitLanes + kk) * kLanes, a[i]);
  }
  // The definition's lane tree, per token lane: (a[i] + a[i+8]), then + [i+4], + [i+2], + [i+1].
  for (int i = 0; i < R; ++i) {
    const float* ai = acc + i * kUnitLanes * kLanes;
    __m512 s8[8], s4[4], s2[2];
    for (int q = 0; q < 8; ++q) s8[q] = _mm512_add_ps(_mm512_load_ps(ai + q * kLanes), _mm512_load_ps(ai + (q + 8) * kLanes));
    for (int q = 0; q < 4; ++q) s4[q] = _mm512_add_ps(s8[q], s8[q + 4]);
    for (int q = 0; q < 2; ++q) s2[q] = _mm512_add_ps(s4[q], s4[q + 2]);
    alignas(64) float out[kLanes];
    _mm512_store_ps(out, _mm512_add_ps(s2[0], s2[1]));
    for (int t = 0; t < tb.tokens; ++t) y[t * w.rows + r + i] = out[t];
  }
}

}  // namespace

bool int8_tokens_handles(const MatrixView& w, int64_t n) {
  return w.format == TensorFormat::Q4G && n >= kInt8TokensMinTokens && int8_simd_handles(w);
}

void matmul_int8_avx512_tokens(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const Int8Activations& act = quantize_for(w, x, n, Int8Layout::EvenOdd, quantize_units_avx512, pool);
  const int64_t units = act.units;
  const int group_shift = __builtin_ctzll(uint64_t(w.group / 32));
  thread_local std::vector<uint8_t> arranged_buf;
  thread_local std::vector<float> arranged_xs_buf;
  arrange_tokens(act, arranged_buf, arranged_xs_buf);
  // The workers must read this thread's buffers: inside the lambda a thread_local name would
  // be the worker's own (empty) one.
  const std::vector<uint8_t>& arranged = arranged_buf;
  const std::vector<float>& arranged_xs = arranged_xs_buf;
  const int64_t blocks = (n + kLanes - 1) / kLanes;
  const int64_t row_bytes = w.cols / 2;
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t row_begin, int64_t row_end) {
    // Per thread: the rows' widened weights and the lane accumulators (reused call to call).
    thread_local std::vector<int8_t> wb_buf;
    thread_local std::vector<int32_t> excess_buf;
    thread_local std::vector<float> acc_buf, scale_buf;
    wb_buf.resize(size_t(kRowsPerPass * units * 32));
    excess_buf.resize(size_t(kRowsPerPass * units));
    scale_buf.resize(size_t(kRowsPerPass * units));
    acc_buf.resize(size_t(kRowsPerPass * kUnitLanes * kLanes) + 16);
    float* acc = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(acc_buf.data()) + 63) & ~uintptr_t(63));
    for (int64_t r = row_begin; r < row_end; r += kRowsPerPass) {
      const int R = int(std::min<int64_t>(kRowsPerPass, row_end - r));
      const int8_t* wb[kRowsPerPass];
      const int32_t* ex[kRowsPerPass];
      const float* sc[kRowsPerPass];
      for (int i = 0; i < R; ++i) {
        wb[i] = wb_buf.data() + i * units * 32;
        ex[i] = excess_buf.data() + i * units;
        sc[i] = scale_buf.data() + i * units;
        widen_row(static_cast<const uint8_t*>(w.data) + (r + i) * row_bytes, w.scales + (r + i) * (w.cols / w.group),
                  units, group_shift, wb_buf.data() + i * units * 32, excess_buf.data() + i * units,
                  scale_buf.data() + i * units);
      }
      for (int64_t b = 0; b < blocks; ++b) {
        const TokenBlock tb{arranged.data() + size_t(b * units * kDwordsPerUnit * kLanes * 4),
                            arranged_xs.data() + size_t(b * units * kLanes),
                            int(std::min<int64_t>(kLanes, n - b * kLanes))};
        float* yb = y + b * kLanes * w.rows;
        switch (R) {
          case 8: rows_block<8>(w, units, wb, ex, sc, tb, acc, r, yb); break;
          case 7: rows_block<7>(w, units, wb, ex, sc, tb, acc, r, yb); break;
          case 6: rows_block<6>(w, units, wb, ex, sc, tb, acc, r, yb); break;
          case 5: rows_block<5>(w, units, wb, ex, sc, tb, acc, r, yb); break;
          case 4: rows_block<4>(w, units, wb, ex, sc, tb, acc, r, yb); break;
          case 3: rows_block<3>(w, units, wb, ex, sc, tb, acc, r, yb); break;
          case 2: rows_block<2>(w, units, wb, ex, sc, tb, acc, r, yb); break;
          default: rows_block<1>(w, units, wb, ex, sc, tb, acc, r, yb); break;
        }
      }
    }
  });
}

}  // namespace waste
