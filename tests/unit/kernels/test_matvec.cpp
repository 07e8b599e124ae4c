#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "shared/kernels/matvec.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/cpu.h"
#include "shared/util/half.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

using namespace waste;
using namespace waste::test;

namespace {

const TensorFormat kFormats[] = {TensorFormat::F32, TensorFormat::BF16, TensorFormat::F16, TensorFormat::Q8G,
                                 TensorFormat::Q4G};

// Every path of this CPU (matvec_paths.h's one list), whatever WASTE_SIMD says: the cap
// chooses matvec()'s path, these tests compare all of them.
std::vector<KernelPath> available_paths() { return available_kernel_paths(); }

bool quantized(TensorFormat f) { return f == TensorFormat::Q8G || f == TensorFormat::Q4G; }

struct Shape {
  int64_t rows, cols;
  uint32_t group;
};

// Shapes for a format: odd row counts; float formats get column counts that are not a
// multiple of any vector width, quantized ones multiples of the group.
std::vector<Shape> shapes_for(TensorFormat f) {
  std::vector<Shape> s;
  if (quantized(f)) {
    for (uint32_t g : {32u, 64u, 128u}) {
      s.push_back({1, g, g});
      s.push_back({3, 3 * g, g});
      s.push_back({17, 5 * g, g});
    }
    s.push_back({1000, 4096, 32});
    s.push_back({17, 4096, 128});
    s.push_back({5, 96 * 7, 96});  // group not a power of two, column block of 5 groups
  } else {
    for (int64_t cols : {32, 33, 47, 100, 257, 1000, 4096}) s.push_back({cols == 4096 ? 17 : 3, cols, 0});
    s.push_back({1, 1, 0});
    s.push_back({1000, 1031, 0});
  }
  return s;
}

std::string describe(KernelPath p, TensorFormat f, const Shape& s) {
  return std::string(kernel_path_name(p)) + " " + format_name(f) + " [" + std::to_string(s.rows) + ", " +
         std::to_string(s.cols) + "] group " + std::to_string(s.group);
}

// sum_c |w_rc x_c|: the scale of the rounding error any summation order may make.
std::vector<double> abs_sums(const MatrixView& w, const float* x) {
  std::vector<double> out(static_cast<size_t>(w.rows));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    double a = 0;
    for (int64_t c = 0; c < w.cols; ++c) a += std::fabs(double(row[size_t(c)]) * x[c]);
    out[size_t(r)] = a;
  }
  return out;
}

}  // namespace

// The f32-activation path (WASTE_TRUNK_ACT=f32); the int8 one is test_matvec_int8.cpp.
TEST_CASE("every path equals the scalar reference exactly on exactly representable data") {
  std::mt19937 rng(1);
  for (TensorFormat f : kFormats)
    for (const Shape& s : shapes_for(f)) {
      StoredMatrix m = exact_matrix(f, s.rows, s.cols, s.group, rng);
      std::vector<float> x = random_activations(s.cols, rng, true);
      std::vector<float> ref(static_cast<size_t>(s.rows));
      matvec_scalar(m.view, x.data(), ref.data(), 0, s.rows);
      for (KernelPath p : available_paths()) {
        std::vector<float> y(size_t(s.rows), -1.0f);
        matvec_path(p, ActivationMode::F32, m.view, x.data(), y.data(), nullptr);
        INFO(describe(p, f, s));
        for (int64_t r = 0; r < s.rows; ++r) REQUIRE_EQ(y[size_t(r)], ref[size_t(r)]);
      }
    }
}

TEST_CASE("every path matches the scalar reference on random data within f32 rounding") {
  std::mt19937 rng(2);
  for (TensorFormat f : kFormats)
    for (const Shape& s : shapes_for(f)) {
      StoredMatrix m = random_matrix(f, s.rows, s.cols, s.group, rng);
      std::vector<float> x = random_activations(s.cols, rng);
      std::vector<float> ref(static_cast<size_t>(s.rows));
      matvec_scalar(m.view, x.data(), ref.data(), 0, s.rows);
      std::vector<double> scale = abs_sums(m.view, x.data());
      for (KernelPath p : available_paths()) {
        std::vector<float> y(static_cast<size_t>(s.rows));
        matvec_path(p, ActivationMode::F32, m.view, x.data(), y.data(), nullptr);
        INFO(describe(p, f, s));
        double worst = 0;
        for (int64_t r = 0; r < s.rows; ++r) {
          // f32 sums over <= 4096 terms: the error stays far below 1e-5 of sum |w x|.
          double err = std::fabs(double(y[size_t(r)]) - ref[size_t(r)]) / (scale[size_t(r)] + 1e-30);
          worst = std::max(worst, err);
        }
        CHECK_LT(worst, 1e-5);
      }
    }
}

TEST_CASE("matvec() uses a path that matches the reference of the process's activation mode") {
  std::mt19937 rng(3);
  StoredMatrix m = random_matrix(TensorFormat::Q4G, 300, 1024, 32, rng);  // > 256K weights: threaded
  std::vector<float> x = random_activations(1024, rng), y(300), ref(300);
  matvec(m.view, x.data(), y.data());
  if (activation_mode() == ActivationMode::Int8) {
    matmul_int8_scalar(m.view, x.data(), 1, ref.data(), nullptr);
    CHECK_EQ(std::memcmp(y.data(), ref.data(), 300 * 4), 0);
  } else {
    matvec_scalar(m.view, x.data(), ref.data(), 0, 300);
    std::vector<double> scale = abs_sums(m.view, x.data());
    for (int r = 0; r < 300; ++r) CHECK_LT(std::fabs(y[size_t(r)] - ref[size_t(r)]), 1e-5 * scale[size_t(r)]);
  }
}

TEST_CASE("matmul equals matvec per token bit for bit on every path") {
  std::mt19937 rng(4);
  ThreadPool pool(3);
  for (TensorFormat f : kFormats) {
    const Shape shapes[] = {{17, quantized(f) ? 640 : 650, 64}, {6, quantized(f) ? 96 : 40, 32}, {75, 128, 32}};
    for (const Shape& s : shapes) {
      StoredMatrix m = random_matrix(f, s.rows, s.cols, s.group, rng);
      for (int64_t n : {1, 2, 3, 4, 5, 8, 67}) {
        std::vector<float> x = random_activations(n * s.cols, rng);
        for (KernelPath p : available_paths())
          for (ActivationMode mode : {ActivationMode::F32, ActivationMode::Int8}) {
            INFO(describe(p, f, s), " n ", n, " ", activation_mode_name(mode));
            std::vector<float> y(static_cast<size_t>(n * s.rows)), one(size_t(s.rows));
            matmul_path(p, mode, m.view, x.data(), n, y.data(), n == 67 ? &pool : nullptr);
            for (int64_t t = 0; t < n; ++t) {
              matvec_path(p, mode, m.view, x.data() + t * s.cols, one.data(), nullptr);
              REQUIRE_EQ(std::memcmp(one.data(), y.data() + t * s.rows, size_t(s.rows) * 4), 0);
            }
          }
      }
    }
  }
}

TEST_CASE("results do not depend on the thread count") {
  std::mt19937 rng(5);
  ThreadPool one(1), three(3);
  for (TensorFormat f : kFormats) {
    StoredMatrix m = random_matrix(f, 1001, 512, 32, rng);
    std::vector<float> x = random_activations(512 * 5, rng);
    for (KernelPath p : available_paths())
    for (ActivationMode mode : {ActivationMode::F32, ActivationMode::Int8}) {
      INFO(kernel_path_name(p), " ", format_name(f), " ", activation_mode_name(mode));
      for (int64_t n : {1, 5}) {
        std::vector<float> a(static_cast<size_t>(1001 * n)), b(a.size()), c(a.size());
        matmul_path(p, mode, m.view, x.data(), n, a.data(), &one);
        matmul_path(p, mode, m.view, x.data(), n, b.data(), &three);
        matmul_path(p, mode, m.view, x.data(), n, c.data(), nullptr);
        CHECK_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
        CHECK_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0);
      }
    }
  }
}

TEST_CASE("groups the SIMD paths do not handle fall back to the scalar path") {
  std::mt19937 rng(6);
  StoredMatrix m = random_matrix(TensorFormat::Q4G, 9, 48 * 5, 48, rng);
  CHECK_FALSE(simd_handles(m.view));
  std::vector<float> x = random_activations(48 * 5, rng), ref(9);
  matvec_scalar(m.view, x.data(), ref.data(), 0, 9);
  for (KernelPath p : available_paths()) {
    std::vector<float> y(9);
    matvec_path(p, ActivationMode::F32, m.view, x.data(), y.data(), nullptr);
    CHECK_EQ(std::memcmp(y.data(), ref.data(), 9 * 4), 0);
  }
}

TEST_CASE("matvec()'s path is one the CPU has, scalar under WASTE_SIMD=scalar, else the widest") {
  const KernelPath best = best_kernel_path();
  INFO("best ", std::string(kernel_path_name(best)), ", ", cpu_summary());
  CHECK(kernel_path_available(best));
  const std::vector<KernelPath> paths = available_paths();
  REQUIRE_FALSE(paths.empty());
  CHECK_EQ(paths.front(), KernelPath::Scalar);
  if (simd_level() == SimdLevel::Scalar) CHECK_EQ(best, KernelPath::Scalar);
  // Uncapped, the widest path of the CPU's architecture (kAllKernelPaths lists each
  // architecture's paths narrowest first): AVX-512, or on aarch64 neon-i8mm > neon-dotprod >
  // neon by the CPU's features.
  if (simd_level() == best_simd_level(cpu_features())) CHECK_EQ(best, paths.back());
}

TEST_CASE("malformed matrix views are refused with an Error") {
  std::mt19937 rng(7);
  StoredMatrix m = random_matrix(TensorFormat::Q8G, 4, 64, 32, rng);
  std::vector<float> x(64), y(4);
  MatrixView bad = m.view;
  bad.group = 48;  // 64 % 48 != 0
  CHECK_THROWS_AS(matvec(bad, x.data(), y.data()), Error);
  bad = m.view;
  bad.scales = nullptr;
  CHECK_THROWS_AS(matvec(bad, x.data(), y.data()), Error);
  bad = m.view;
  bad.format = TensorFormat::VQ3R;
  CHECK_THROWS_AS(matvec(bad, x.data(), y.data()), Error);
  bad = m.view;
  bad.cols = 0;
  CHECK_THROWS_AS(matvec(bad, x.data(), y.data()), Error);
  bad = m.view;
  bad.format = TensorFormat::Q4G;
  bad.group = 33;
  bad.cols = 66;
  CHECK_THROWS_AS(matvec(bad, x.data(), y.data()), Error);
  bad = m.view;
  CHECK_THROWS_AS(matmul(bad, x.data(), -1, y.data()), Error);
}

TEST_CASE("dequantize_row: Q4G rows on AVX-512 give the formula's bits (q - 8) * scale") {
#if defined(__x86_64__)
  if (!kernel_path_available(KernelPath::Avx512)) return;
  std::mt19937 rng(23);
  for (uint32_t group : {32u, 64u, 128u}) {
    StoredMatrix m = random_matrix(TensorFormat::Q4G, 3, 512, group, rng);
    const auto* q = static_cast<const uint8_t*>(m.view.data);
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<float> got(512, -1.0f), via_row(512, -2.0f);
      dequantize_row_q4g_avx512(q + r * 256, m.view.scales + r * (512 / group), 512, group, got.data());
      dequantize_row(m.view, r, via_row.data());
      for (int64_t c = 0; c < 512; ++c) {
        const uint8_t byte = q[r * 256 + c / 2];
        const int nib = c % 2 ? byte >> 4 : byte & 0xf;
        const float want = float(nib - 8) * f16_to_f32(m.view.scales[r * (512 / group) + c / group]);
        CHECK_EQ(f32_to_bits(got[size_t(c)]), f32_to_bits(want));
        CHECK_EQ(f32_to_bits(via_row[size_t(c)]), f32_to_bits(want));
      }
    }
  }
#endif
}
