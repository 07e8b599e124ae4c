// Scalar reference of the VQ3R lookup-table kernels (the definition the SIMD paths match).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "shared/rvq/kernel_paths.h"
#include "shared/rvq/mul_exact.h"
#include "shared/util/half.h"

namespace waste::rvq_detail {

void transpose_books(const float* books, BooksT& out) {
  for (int s = 0; s < kVqStages; ++s)
    for (int j = 0; j < kVqEntries; ++j)
      for (int d = 0; d < kVqDim; ++d) out.t[s][d][j] = books[(size_t(s) * kVqEntries + j) * kVqDim + d];
}

float table_block_scalar(const float* x, int nv, const BooksT& b, uint8_t* q) {
  constexpr int kPer = kVqStages * kVqEntries;
  float f[kLutBlockVectors][kPer];
  float maxabs = 0;
  for (int v = 0; v < nv; ++v)
    for (int s = 0; s < kVqStages; ++s)
      for (int j = 0; j < kVqEntries; ++j) {
        float a = mul_exact(b.t[s][0][j], x[v * kVqDim]);  // a plain product would fuse with the first add
        for (int d = 1; d < kVqDim; ++d) a = a + mul_exact(b.t[s][d][j], x[v * kVqDim + d]);
        f[v][s * kVqEntries + j] = a;
        maxabs = std::max(maxabs, std::fabs(a));
      }
  // Zero block (or x == 0): every entry is the bias and the scale 0.
  const float inv = maxabs > 0 ? 127.0f / maxabs : 0.0f;
  for (int v = 0; v < nv; ++v)
    for (int i = 0; i < kPer; ++i) {
      float r = std::nearbyint(f[v][i] * inv);
      r = std::clamp(r, -127.0f, 127.0f);
      q[v * kPer + i] = uint8_t(int(r) + kLutBias);
    }
  return maxabs / 127.0f;
}

void matmul_tiles_scalar(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const RvqTables* const* t,
                         int n, float* y, size_t y_stride, int tile_begin, int tile_end) {
  const int G = cols / kVqDim;
  const int blocks = (G + kLutBlockVectors - 1) / kLutBlockVectors;
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const uint8_t* tc = codes + size_t(tile) * G * kVqStages * kVqTileRows;
    const int r_end = std::min(rows - tile * kVqTileRows, kVqTileRows);
    for (int i = 0; i < n; ++i) {
      const RvqTables& tb = *t[i];
      for (int rr = 0; rr < r_end; ++rr) {
        float acc = 0;
        for (int b = 0; b < blocks; ++b) {
          const int g0 = b * kLutBlockVectors, g1 = std::min(G, g0 + kLutBlockVectors);
          int32_t sum = 0;
          for (int g = g0; g < g1; ++g)
            for (int s = 0; s < kVqStages; ++s)
              sum += tb.q[(size_t(g) * kVqStages + s) * kVqEntries + tc[(size_t(g) * kVqStages + s) * kVqTileRows + rr]];
          sum -= kLutBias * kVqStages * (g1 - g0);
          acc = acc + mul_exact(float(sum), tb.block_scale[size_t(b)]);
        }
        const int r = tile * kVqTileRows + rr;
        y[size_t(i) * y_stride + size_t(r)] = acc * f16_to_f32(scales[r]);
      }
    }
  }
}

}  // namespace waste::rvq_detail
