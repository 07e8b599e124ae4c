// Random trunk matrices for the kernel tests, built straight in the stored layout.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "shared/container/format.h"
#include "shared/kernels/matvec.h"
#include "shared/kernels/quantize.h"

namespace waste::test {

// A matrix in its stored bytes plus a view onto them.
struct StoredMatrix {
  std::vector<uint8_t> bytes;
  MatrixView view;
};

inline StoredMatrix wrap(std::vector<uint8_t> bytes, TensorFormat f, int64_t rows, int64_t cols, uint32_t group) {
  StoredMatrix m{std::move(bytes), {}};
  TensorBytes layout = trunk_tensor_bytes(f, uint64_t(rows), uint64_t(cols), group);
  m.view.format = f;
  m.view.rows = rows;
  m.view.cols = cols;
  m.view.group = (f == TensorFormat::Q8G || f == TensorFormat::Q4G) ? group : 0;
  m.view.data = m.bytes.data();
  m.view.scales = layout.scales_offset ? reinterpret_cast<const uint16_t*>(m.bytes.data() + layout.scales_offset) : nullptr;
  return m;
}

// Gaussian weights quantized/rounded into format f.
inline StoredMatrix random_matrix(TensorFormat f, int64_t rows, int64_t cols, uint32_t group, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> src(static_cast<size_t>(rows * cols));
  for (auto& v : src) v = dist(rng);
  return wrap(quantize_matrix(f, src.data(), uint64_t(rows), uint64_t(cols), group), f, rows, cols, group);
}

// Weights that are small integers times a power of two (scales 1, 1/2, 1/4, 1/8): with
// integer activations in [-4, 4] every product and partial sum is exact in f32, so every
// summation order gives the same, exact result.
inline StoredMatrix exact_matrix(TensorFormat f, int64_t rows, int64_t cols, uint32_t group, std::mt19937& rng) {
  std::uniform_int_distribution<int> small(-8, 8), shift(0, 3);
  if (f == TensorFormat::Q8G || f == TensorFormat::Q4G) {
    TensorBytes layout = trunk_tensor_bytes(f, uint64_t(rows), uint64_t(cols), group);
    std::vector<uint8_t> bytes(layout.total, 0);
    std::uniform_int_distribution<int> q8(-127, 127), q4(0, 15);
    for (int64_t i = 0; i < rows * cols; ++i) {
      if (f == TensorFormat::Q8G) bytes[size_t(i)] = uint8_t(int8_t(q8(rng)));
      else bytes[size_t(i / 2)] |= uint8_t(q4(rng) << ((i & 1) * 4));
    }
    auto* scales = reinterpret_cast<uint16_t*>(bytes.data() + layout.scales_offset);
    const uint16_t pow2_f16[4] = {0x3c00, 0x3800, 0x3400, 0x3000};  // 1, 1/2, 1/4, 1/8
    for (int64_t i = 0; i < rows * (cols / group); ++i) scales[i] = pow2_f16[shift(rng)];
    return wrap(std::move(bytes), f, rows, cols, group);
  }
  std::vector<float> src(static_cast<size_t>(rows * cols));
  for (auto& v : src) v = float(small(rng)) / float(1 << shift(rng));
  return wrap(quantize_matrix(f, src.data(), uint64_t(rows), uint64_t(cols), group), f, rows, cols, group);
}

inline std::vector<float> random_activations(int64_t n, std::mt19937& rng, bool integers = false) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-4, 4);
  for (auto& v : x) v = integers ? float(small(rng)) : dist(rng);
  return x;
}

}  // namespace waste::test
