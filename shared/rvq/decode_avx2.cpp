// AVX2 VQ3R matvec by decoding: without byte permutes a 256-entry lookup is slow, so each
// 8-dim vector is rebuilt in f32 from the three codebook rows (L1-resident) and multiplied
// into x with FMA, 8 rows at a time (their index bytes are adjacent in a tile line). Exact to
// f32 rounding; no table quantisation.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "shared/kernels/simd_traits.h"
#include "shared/rvq/kernel_paths.h"
#include "shared/util/half.h"

namespace waste::rvq_detail {

void matmul_tiles_avx2(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                       int n, float* y, size_t y_stride, int tile_begin, int tile_end) {
  const int G = cols / kVqDim;
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const uint8_t* tc = codes + size_t(tile) * G * kVqStages * kVqTileRows;
    const int r0 = tile * kVqTileRows;
    const int r_end = std::min(rows - r0, kVqTileRows);
    for (int i = 0; i < n; ++i) {
      const float* x = t[i]->x.data();
      const float* b0 = t[i]->books;
      const float* b1 = b0 + kVqEntries * kVqDim;
      const float* b2 = b1 + kVqEntries * kVqDim;
      for (int rr0 = 0; rr0 < r_end; rr0 += 8) {
        __m256 acc[8];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int g = 0; g < G; ++g) {
          const uint8_t* c = tc + size_t(g) * kVqStages * kVqTileRows + rr0;
          uint64_t i0, i1, i2;
          std::memcpy(&i0, c, 8);
          std::memcpy(&i1, c + kVqTileRows, 8);
          std::memcpy(&i2, c + 2 * kVqTileRows, 8);
          const __m256 xg = _mm256_loadu_ps(x + g * kVqDim);
          for (int k = 0; k < 8; ++k) {
            __m256 w = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(b0 + ((i0 >> (8 * k)) & 0xff) * kVqDim),
                                                   _mm256_loadu_ps(b1 + ((i1 >> (8 * k)) & 0xff) * kVqDim)),
                                     _mm256_loadu_ps(b2 + ((i2 >> (8 * k)) & 0xff) * kVqDim));
            acc[k] = _mm256_fmadd_ps(w, xg, acc[k]);
          }
        }
        for (int k = 0; k < 8 && rr0 + k < r_end; ++k)
          y[size_t(i) * y_stride + size_t(r0 + rr0 + k)] = simd::Avx2::sum(acc[k]) * f16_to_f32(scales[r0 + rr0 + k]);
      }
    }
  }
}

}  // namespace waste::rvq_detail
