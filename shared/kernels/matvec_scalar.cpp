#include <cstring>
#include <vector>

#include "shared/kernels/matvec.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/error.h"
#include "shared/util/half.h"

namespace waste {

void dequantize_row(const MatrixView& w, int64_t r, float* out) {
  const int64_t n = w.cols;
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
      for (int64_t c = 0; c < n; ++c) out[c] = float(q[c]) * f16_to_f32(s[c / w.group]);
      return;
    }
    case TensorFormat::Q4G: {
      // Row r starts at element r*n; n is even for every Q4G tensor (groups are even).
      const auto* q = static_cast<const uint8_t*>(w.data) + r * n / 2;
      const uint16_t* s = w.scales + r * (n / w.group);
      for (int64_t c = 0; c < n; ++c) {
        int nib = (q[c / 2] >> ((c & 1) * 4)) & 0xf;
        out[c] = float(nib - 8) * f16_to_f32(s[c / w.group]);
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
