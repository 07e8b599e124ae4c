#include <cstring>
#include <vector>

#include "shared/kernels/matvec.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/cpu.h"
#include "shared/util/error.h"
#include "shared/util/half.h"

namespace waste {

void dequantize_row(const MatrixView& w, int64_t r, float* out) {
  const int64_t n = w.cols;
  if (w.format == TensorFormat::Q8G || w.format == TensorFormat::Q4G)
    require(w.group > 0 && n % w.group == 0 && (w.format == TensorFormat::Q8G || w.group % 2 == 0),
            "dequantize_row: cols not a whole number of (even, for q4g) groups");
  switch (w.format) {
    case TensorFormat::F32:
      std::memcpy(out, static_cast<const float*>(w.data) + r * n, size_t(n) * 4);
      return;
    case TensorFormat::BF16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + r * n;
      for (int64_t c = 0; c < n; ++c) out[c] = bf16_to_f32(p[c]);
      return;
    }
    case TensorFormat::F16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + r * n;
      for (int64_t c = 0; c < n; ++c) out[c] = f16_to_f32(p[c]);
      return;
    }
    case TensorFormat::Q8G: {
      const auto* q = static_cast<const int8_t*>(w.data) + r * n;
      const uint16_t* s = w.scales + r * (n / w.group);
      // One scale conversion per group (not per element): same values, a fraction of the time
      // (MLA's absorbed query dequantizes W_UK row by row every token).
      for (int64_t c0 = 0; c0 < n; c0 += w.group) {
        const float scale = f16_to_f32(s[c0 / w.group]);
        for (int64_t c = c0; c < c0 + w.group; ++c) out[c] = float(q[c]) * scale;
      }
      return;
    }
    case TensorFormat::Q4G: {
      // Row r starts at element r*n; n is even for every Q4G tensor (groups are even).
      const auto* q = static_cast<const uint8_t*>(w.data) + r * n / 2;
      const uint16_t* s = w.scales + r * (n / w.group);
#if defined(__x86_64__)
      // MLA's absorb dequantizes every W_UK row each decoded token (5% of a decode's samples).
      if (w.group % 32 == 0 && simd_level() == SimdLevel::Avx512) return dequantize_row_q4g_avx512(q, s, n, w.group, out);
#endif
      for (int64_t c0 = 0; c0 < n; c0 += w.group) {
        const float scale = f16_to_f32(s[c0 / w.group]);
        for (int64_t c = c0; c < c0 + w.group; c += 2) {
          const uint8_t byte = q[c / 2];
          out[c] = float(int(byte & 0xf) - 8) * scale;
          out[c + 1] = float(int(byte >> 4) - 8) * scale;
        }
      }
      return;
    }
    case TensorFormat::VQ3R: break;
  }
  throw Error("dequantize_row: unsupported format");
}

void matvec_scalar(const MatrixView& w, const float* x, float* y, int64_t row_begin, int64_t row_end) {
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row(w, r, row.data());
    double acc = 0;  // the reference sums in double so SIMD paths can be judged against it
    for (int64_t c = 0; c < w.cols; ++c) acc += double(row[size_t(c)]) * x[c];
    y[r] = float(acc);
  }
}

// Dequantizes each row once and dots it with every token, in the same order as
// matvec_scalar, so each token's result is bit-identical to it.
void matmul_scalar(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  for_row_ranges(pool, w.rows, w.cols * n, [&](int64_t row_begin, int64_t row_end) {
    std::vector<float> row(size_t(w.cols));
    for (int64_t r = row_begin; r < row_end; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * w.cols;
        double acc = 0;
        for (int64_t c = 0; c < w.cols; ++c) acc += double(row[size_t(c)]) * xt[c];
        y[t * w.rows + r] = float(acc);
      }
    }
  });
}

}  // namespace waste
