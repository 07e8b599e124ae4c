#include "compute/model/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "shared/kernels/elementwise.h"
#include "shared/kernels/vector_ops.h"
#include "shared/util/error.h"

namespace waste {

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0;  // double: the mean of squares is the one sum whose rounding shows
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(ss / n + double(eps)));
  for (int i = 0; i < n; ++i) out[i] = (w ? w[i] : 1.0f) * (x[i] * inv);
}

void l2_normalize(float* x, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::max(std::sqrt(ss), 1e-12));
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

void softmax(float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  for (int i = 0; i < n; ++i) x[i] -= mx;
  elementwise().exp(x, x, n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += x[i];
  const float inv = float(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

void gated_activation(const ModelConfig& c, const float* gate, const float* up, int64_t n, float* out) {
  if (c.activation == Activation::SiLU) {
    elementwise().gated_silu(gate, up, out, n);  // gated_silu's bits
    return;
  }
  const float b = c.situ_beta, bl = c.situ_linear_beta;
  for (int64_t i = 0; i < n; ++i) out[i] = gated_situ(gate[i], up[i], b, bl);
}

MatrixView row_slice(const MatrixView& w, int64_t row0, int64_t n) {
  require(row0 >= 0 && n >= 0 && row0 + n <= w.rows, "row_slice: rows out of range");
  MatrixView s = w;
  s.rows = n;
  const auto* base = static_cast<const uint8_t*>(w.data);
  switch (w.format) {
    case TensorFormat::F32: s.data = base + row0 * w.cols * 4; break;
    case TensorFormat::BF16:
    case TensorFormat::F16: s.data = base + row0 * w.cols * 2; break;
    case TensorFormat::Q8G:
      s.data = base + row0 * w.cols;
      s.scales = w.scales + row0 * (w.cols / w.group);
      break;
    case TensorFormat::Q4G:
      s.data = base + row0 * w.cols / 2;
      s.scales = w.scales + row0 * (w.cols / w.group);
      break;
    case TensorFormat::VQ3R: throw Error("row_slice: a VQ3R matrix cannot be sliced by rows");
  }
  return s;
}

void matvec_transposed_accumulate(const MatrixView& w, int64_t row0, int64_t n, const float* x, int64_t x_stride,
                                  int64_t tokens, float* y, int64_t y_stride) {
  // Tokens in blocks whose outputs stay in L2 while every row passes over them (a prefill
  // chunk's outputs, 2 KiB a token and head, were streamed from memory once per row); each
  // row is dequantised once per block. Every output still sums the rows in order r = 0, 1, ...
  constexpr int64_t kTokenBlock = 32;
  // Per thread, reused: a decode step calls this once per head and MLA layer.
  thread_local std::vector<float> row;
  row.resize(size_t(w.cols));
  for (int64_t t0 = 0; t0 < tokens; t0 += kTokenBlock) {
    const int64_t t1 = std::min(tokens, t0 + kTokenBlock);
    for (int64_t r = 0; r < n; ++r) {
      dequantize_row(w, row0 + r, row.data());
      for (int64_t t = t0; t < t1; ++t) axpy(x[t * x_stride + r], row.data(), y + t * y_stride, w.cols);
    }
  }
}

}  // namespace waste
