#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "shared/kernels/matvec.h"
#include "shared/kernels/quantize.h"
#include "shared/util/half.h"

using namespace waste;
using namespace waste::test;

namespace {

// Worst |x - dequant(quant(x))| over each group, checked against the bound of a symmetric
// grid of step s: half a step, plus what the f16 rounding of s (relative 2^-11) can add at
// the clamped ends.
void check_group_error(TensorFormat f, int64_t rows, int64_t cols, uint32_t group, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> src(static_cast<size_t>(rows * cols));
  for (auto& v : src) v = dist(rng);
  StoredMatrix m = wrap(quantize_matrix(f, src.data(), uint64_t(rows), uint64_t(cols), group), f, rows, cols, group);
  const float qmax = f == TensorFormat::Q8G ? 127.0f : 7.0f;
  std::vector<float> row(static_cast<size_t>(cols));
  double worst_ratio = 0;
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(m.view, r, row.data());
    for (int64_t g = 0; g < cols / group; ++g) {
      float amax = 0;
      for (uint32_t i = 0; i < group; ++i) amax = std::fmax(amax, std::fabs(src[size_t(r * cols + g * group + i)]));
      const float s = f16_to_f32(m.view.scales[r * (cols / group) + g]);
      CHECK_LE(std::fabs(s - amax / qmax), amax / qmax * 0x1p-11f * 1.01f);
      const double bound = 0.5 * s + amax * 0x1p-11 + 1e-12;
      for (uint32_t i = 0; i < group; ++i) {
        const int64_t c = g * group + i;
        const double err = std::fabs(double(row[size_t(c)]) - src[size_t(r * cols + c)]);
        REQUIRE_LE(err, bound);
        worst_ratio = std::max(worst_ratio, err / (0.5 * s));
      }
    }
  }
  // The bound is not vacuous: some element lands close to half a step away.
  CHECK_GT(worst_ratio, 0.9);
}

}  // namespace

TEST_CASE("Q8G quantize -> dequantize error stays within half a step") {
  check_group_error(TensorFormat::Q8G, 7, 256, 32, 0.05f, 11);
  check_group_error(TensorFormat::Q8G, 3, 384, 128, 1.0f, 12);
}

TEST_CASE("Q4G quantize -> dequantize error stays within half a step") {
  check_group_error(TensorFormat::Q4G, 7, 256, 32, 0.05f, 13);
  check_group_error(TensorFormat::Q4G, 3, 384, 64, 1.0f, 14);
  check_group_error(TensorFormat::Q4G, 5, 7168, 128, 0.05f, 15);  // --trunk-group 128 at K3's width
}

TEST_CASE("values on the grid round-trip exactly; zero groups stay zero") {
  // Group 0: k/127 * 2 (on the Q8G grid with scale 2/127 rounded to f16 -> not exact), so
  // use a power-of-two scale: max |x| = 127/64 gives s = 1/64 exactly.
  std::vector<float> src(64, 0.0f);
  for (int i = 0; i < 32; ++i) src[size_t(i)] = float((i * 37) % 255 - 127) / 64.0f;
  src[0] = 127.0f / 64.0f;
  StoredMatrix m = wrap(quantize_matrix(TensorFormat::Q8G, src.data(), 1, 64, 32), TensorFormat::Q8G, 1, 64, 32);
  std::vector<float> out(64);
  dequantize_row(m.view, 0, out.data());
  for (int i = 0; i < 64; ++i) CHECK_EQ(out[size_t(i)], src[size_t(i)]);
  CHECK_EQ(m.view.scales[1], 0);  // all-zero group

  std::vector<float> q4(32);
  for (int i = 0; i < 32; ++i) q4[size_t(i)] = float(i % 15 - 7) * 0.25f;  // levels -7..7, s = 1/4
  StoredMatrix m4 = wrap(quantize_matrix(TensorFormat::Q4G, q4.data(), 1, 32, 32), TensorFormat::Q4G, 1, 32, 32);
  dequantize_row(m4.view, 0, out.data());
  for (int i = 0; i < 32; ++i) CHECK_EQ(out[size_t(i)], q4[size_t(i)]);
  // Element 2j sits in the low nibble of byte j: element 0 is -7 -> nibble 1, element 1 is -6 -> 2.
  CHECK_EQ(m4.bytes[0], uint8_t(0x21));
}
