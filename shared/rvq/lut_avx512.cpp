// AVX-512 (F/BW/VBMI) VQ3R kernels: table build 16 entries per instruction, and lookups of
// 64 rows at once with two merging vpermi2b (entries 128-255 where the index's top bit is
// set, then 0-127 in the other lanes). Lookups are biased unsigned bytes, split into even/odd rows and summed exactly in
// int16 per block of 8 vector positions, then flushed to f32 as the scalar reference does.
// It has no AVX2 twin: without byte permutes AVX2 decodes instead (decode_avx2.cpp).
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "shared/kernels/prefetch.h"
#include "shared/kernels/simd_traits.h"
#include "shared/rvq/kernel_paths.h"
#include "shared/util/half.h"

namespace waste::rvq_detail {

using simd::Avx512;

float table_block_avx512(const float* x, int nv, const BooksT& b, uint8_t* q) {
  constexpr int kPer = kVqStages * kVqEntries;
  alignas(64) float f[kLutBlockVectors][kPer];
  __m512 maxv = _mm512_setzero_ps();
  for (int v = 0; v < nv; ++v) {
    __m512 xs[kVqDim];
    for (int d = 0; d < kVqDim; ++d) xs[d] = _mm512_set1_ps(x[v * kVqDim + d]);
    for (int s = 0; s < kVqStages; ++s)
      for (int j = 0; j < kVqEntries; j += 16) {
        __m512 a = Avx512::mul_exact(_mm512_load_ps(&b.t[s][0][j]), xs[0]);
        for (int d = 1; d < kVqDim; ++d) a = _mm512_add_ps(a, Avx512::mul_exact(_mm512_load_ps(&b.t[s][d][j]), xs[d]));
        _mm512_store_ps(&f[v][s * kVqEntries + j], a);
        maxv = _mm512_max_ps(maxv, _mm512_abs_ps(a));
      }
  }
  alignas(64) float m16[16];
  _mm512_store_ps(m16, maxv);
  float maxabs = 0;
  for (float m : m16) maxabs = std::max(maxabs, m);
  const float inv_s = maxabs > 0 ? 127.0f / maxabs : 0.0f;
  const __m512 inv = _mm512_set1_ps(inv_s);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), bias = _mm512_set1_epi32(kLutBias);
  for (int v = 0; v < nv; ++v)
    for (int i = 0; i < kPer; i += 16) {
      // cvtps rounds to nearest even, as nearbyint does in the reference.
      __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(&f[v][i]), inv));
      r = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(r, lo), hi), bias);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + v * kPer + i), _mm512_cvtepi32_epi8(r));
    }
  return maxabs / 127.0f;
}

namespace {

constexpr int kTablePrefetchAhead = 4;  // vector positions
// A decode's codes stream from memory once (one token per expert); the hardware prefetcher
// follows NT interleaved streams 12-55 KB apart and stops at every 4 KiB page. Fetching each
// tile's codes 8 vector positions (1.5 KB) ahead: apply_expert on 1 core +5-10%, Kimi-Linear
// and K3 shapes, alternated (waste-bench-kernels; 4 and 16 did no better). With n > 1 the
// block's codes are in L1 after the first token, so only token 0 prefetches.
constexpr int kCodePrefetchAhead = 8;

// One block of vector positions [g0, g1) of NT row tiles (NT*64 rows) for input q (one
// token's tables), added into that token's accumulators of those tiles: acc holds NT*64 floats
// laid out per tile as [even rows 0..62][odd rows 1..63]. `first_pass`: this is the first
// tile group to read the block's tables (prefetch the next ones); `lead`: the first token of
// the call at this block (prefetch the codes ahead; later tokens find them in cache).
template <int NT>
void lut_block(const uint8_t* base, size_t tile_stride, const RvqTables& t, int G, int g0, int g1, bool first_pass,
               bool lead, float* acc) {
  const uint8_t* q = t.q.data();
  const __m512i bias = _mm512_set1_epi16(int16_t(kLutBias * kVqStages * (g1 - g0)));
  // Per 16-bit lane (an even row's byte below an odd row's): as[k] sums the lanes whole, mod
  // 2^16, ao[k] the odd rows' bytes alone; the even rows' sum is as - 256 ao (mod 2^16),
  // exact because it is at most 255 x 3 stages x 8 positions < 2^16. Three operations a
  // lookup where masking out the even bytes took four.
  __m512i as[NT], ao[NT];
  for (int k = 0; k < NT; ++k) as[k] = ao[k] = _mm512_setzero_si512();
  for (int g = g0; g < g1; ++g) {
    const uint8_t* tg = q + size_t(g) * kVqStages * kVqEntries;
    // A prefill's tables (442 KiB per token for gate and up, each token's used by a few
    // experts) come from memory, not L2, and the loads stalled the lookups: fetch the
    // table of position g + 4 ahead (15% off the expert phase of a 128-token chunk).
    if (first_pass && g + kTablePrefetchAhead < G) {
      const char* ahead = reinterpret_cast<const char*>(tg + kTablePrefetchAhead * kVqStages * kVqEntries);
      for (int l = 0; l < kVqStages * kVqEntries; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
    }
    if (lead && g + kCodePrefetchAhead < G)
      for (int k = 0; k < NT; ++k)
        prefetch_range(base + k * tile_stride + size_t(g + kCodePrefetchAhead) * kVqStages * kVqTileRows,
                       kVqStages * kVqTileRows);
    __m512i T[kVqStages][4];
    for (int s = 0; s < kVqStages; ++s)
      for (int p = 0; p < 4; ++p) T[s][p] = _mm512_loadu_si512(tg + s * kVqEntries + p * 64);
    for (int k = 0; k < NT; ++k) {
      const uint8_t* c = base + k * tile_stride + size_t(g) * kVqStages * kVqTileRows;
      for (int s = 0; s < kVqStages; ++s) {
        const __m512i idx = _mm512_loadu_si512(c + s * kVqTileRows);
        // Entries 128-255 first, into the lanes whose index has its top bit set (the others
        // keep the index itself, 0-127); then entries 0-127 into the others, indexed by that
        // same vector: two merging permutes and no blend.
        const __mmask64 high = _mm512_movepi8_mask(idx);
        const __m512i h = _mm512_mask2_permutex2var_epi8(T[s][2], idx, high, T[s][3]);
        const __m512i v = _mm512_mask2_permutex2var_epi8(T[s][0], h, _knot_mask64(high), T[s][1]);
        as[k] = _mm512_add_epi16(as[k], v);
        ao[k] = _mm512_add_epi16(ao[k], _mm512_srli_epi16(v, 8));
      }
    }
  }
  const __m512 sc = _mm512_set1_ps(t.block_scale[size_t(g0 / kLutBlockVectors)]);
  for (int k = 0; k < NT; ++k) {
    float* a = acc + size_t(k) * kVqTileRows;
    const __m512i e = _mm512_sub_epi16(_mm512_sub_epi16(as[k], _mm512_slli_epi16(ao[k], 8)), bias);
    const __m512i o = _mm512_sub_epi16(ao[k], bias);
    const __m256i parts[4] = {_mm512_castsi512_si256(e), _mm512_extracti64x4_epi64(e, 1), _mm512_castsi512_si256(o),
                              _mm512_extracti64x4_epi64(o, 1)};
    for (int p = 0; p < 4; ++p) {
      __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(parts[p]));
      _mm512_storeu_ps(a + 16 * p, _mm512_add_ps(_mm512_loadu_ps(a + 16 * p), Avx512::mul_exact(f, sc)));
    }
  }
}

}  // namespace

void matmul_tiles_avx512(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                         int n, float* y, size_t y_stride, int tile_begin, int tile_end) {
  const int G = cols / kVqDim;
  const int tiles = tile_end - tile_begin;
  const size_t tile_stride = size_t(G) * kVqStages * kVqTileRows;
  // Blocks of positions outermost, then tokens, then groups of kLutGroupTiles tiles (256 rows
  // share each table load): a token's tables of one block (6 KiB) are read from memory once for
  // all of this call's tiles and stay in L1 for the other groups. (Tile groups outermost read every
  // table once per group: 4 times for a Kimi-Linear gate, 9 for its down, and in a prefill
  // chunk those tables come from memory.) The accumulators of every (token, tile) are kept,
  // so bound the token chunk.
  constexpr int kMaxTokens = 16;
  thread_local std::vector<float> accf;
  const size_t per_token = size_t(tiles) * kVqTileRows;
  if (accf.size() < size_t(kMaxTokens) * per_token) accf.resize(size_t(kMaxTokens) * per_token);
  for (int i0 = 0; i0 < n; i0 += kMaxTokens) {
    const int ni = std::min(kMaxTokens, n - i0);
    std::fill(accf.begin(), accf.begin() + ptrdiff_t(size_t(ni) * per_token), 0.0f);
    for (int g0 = 0; g0 < G; g0 += kLutBlockVectors) {
      const int g1 = std::min(G, g0 + kLutBlockVectors);
      for (int i = 0; i < ni; ++i) {
        const RvqTables& ti = *t[i0 + i];
        for (int tile = tile_begin; tile < tile_end;) {
          const int nt = std::min(kLutGroupTiles, tile_end - tile);
          const uint8_t* base = codes + size_t(tile) * tile_stride;
          float* acc = accf.data() + size_t(i) * per_token + size_t(tile - tile_begin) * kVqTileRows;
          const bool first_pass = tile == tile_begin, lead = i == 0;
          switch (nt) {
            case 4: lut_block<4>(base, tile_stride, ti, G, g0, g1, first_pass, lead, acc); break;
            case 3: lut_block<3>(base, tile_stride, ti, G, g0, g1, first_pass, lead, acc); break;
            case 2: lut_block<2>(base, tile_stride, ti, G, g0, g1, first_pass, lead, acc); break;
            default: lut_block<1>(base, tile_stride, ti, G, g0, g1, first_pass, lead, acc); break;
          }
          tile += nt;
        }
      }
    }
    for (int i = 0; i < ni; ++i)
      for (int tile = tile_begin; tile < tile_end; ++tile) {
        const float* a = accf.data() + size_t(i) * per_token + size_t(tile - tile_begin) * kVqTileRows;
        const int r0 = tile * kVqTileRows;
        const int r_end = std::min(rows - r0, kVqTileRows);
        float* yi = y + size_t(i0 + i) * y_stride + size_t(r0);
        if (r_end == kVqTileRows) {  // a whole tile: even and odd rows interleaved 16 at a time
          const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
          const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
          for (int h = 0; h < 2; ++h) {  // rows 32h .. 32h + 31: evens a[16h ..], odds a[32 + 16h ..]
            const __m512 even = _mm512_loadu_ps(a + 16 * h), odd = _mm512_loadu_ps(a + 32 + 16 * h);
            for (int q = 0; q < 2; ++q) {
              const int row = 32 * h + 16 * q;
              const __m512 v = _mm512_permutex2var_ps(even, q == 0 ? lo : hi, odd);
              const __m512 sc = _mm512_cvtph_ps(
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + r0 + row)));
              _mm512_storeu_ps(yi + row, _mm512_mul_ps(v, sc));
            }
          }
          continue;
        }
        for (int p = 0; p < kVqTileRows; ++p) {
          const int rr = p < 32 ? 2 * p : 2 * (p - 32) + 1;
          if (rr < r_end) yi[rr] = a[p] * f16_to_f32(scales[r0 + rr]);
        }
      }
  }
}

}  // namespace waste::rvq_detail
