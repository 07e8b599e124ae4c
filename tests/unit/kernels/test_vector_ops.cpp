#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "shared/kernels/matvec_paths.h"
#include "shared/kernels/vector_ops.h"

using namespace waste;

namespace {

std::vector<float> randn(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

double dot_ref(const float* a, const float* b, int64_t n, double* abs_sum) {
  double s = 0, a_s = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += double(a[i]) * b[i];
    a_s += std::fabs(double(a[i]) * b[i]);
  }
  *abs_sum = a_s;
  return s;
}

}  // namespace

TEST_CASE("dot and sum_squares match a double reference on every path") {
  std::mt19937 rng(21);
  for (int64_t n : {0, 1, 7, 8, 9, 31, 32, 33, 100, 7168}) {
    std::vector<float> a = randn(n, rng), b = randn(n, rng);
    double abs_sum = 0;
    const double ref = dot_ref(a.data(), b.data(), n, &abs_sum);
    const double tol = 1e-6 * abs_sum + 1e-30;
    INFO("n = ", n);
    CHECK_LE(std::fabs(dot(a.data(), b.data(), n) - ref), tol);
    CHECK_LE(std::fabs(dot_scalar(a.data(), b.data(), n) - ref), tol);
    double sq_abs = 0;
    const double sq = dot_ref(a.data(), a.data(), n, &sq_abs);
    CHECK_LE(std::fabs(sum_squares(a.data(), n) - sq), 1e-6 * sq + 1e-30);
#if defined(__x86_64__)
    if (kernel_path_available(KernelPath::Avx2)) {
      CHECK_LE(std::fabs(dot_avx2(a.data(), b.data(), n) - ref), tol);
      CHECK_LE(std::fabs(sum_squares_avx2(a.data(), n) - sq), 1e-6 * sq + 1e-30);
    }
#elif defined(__aarch64__)
    if (kernel_path_available(KernelPath::Neon)) {
      CHECK_LE(std::fabs(dot_neon(a.data(), b.data(), n) - ref), tol);
      CHECK_LE(std::fabs(sum_squares_neon(a.data(), n) - sq), 1e-6 * sq + 1e-30);
    }
#endif
  }
}

TEST_CASE("axpy, scale, add are element-wise and exact where f32 is") {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, y = {0.5f, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1};
  axpy(2.0f, x.data(), y.data(), 11);
  CHECK_EQ(y[0], 2.5f);
  CHECK_EQ(y[10], 21.0f);
  scale(y.data(), 0.5f, 11);
  CHECK_EQ(y[0], 1.25f);
  CHECK_EQ(y[10], 10.5f);
  std::vector<float> out(11);
  add(x.data(), y.data(), out.data(), 11);
  CHECK_EQ(out[0], 2.25f);
  CHECK_EQ(out[10], 21.5f);
  add(x.data(), x.data(), x.data(), 11);  // in place
  CHECK_EQ(x[10], 22.0f);
}

TEST_CASE("axpy: the AVX2 path gives the scalar bits, tails included") {
#if defined(__x86_64__)
  if (!kernel_path_available(KernelPath::Avx2)) return;
  std::mt19937 rng(11);
  for (int64_t n : {0, 1, 7, 8, 9, 31, 512, 1001}) {
    const std::vector<float> x = randn(n, rng), y0 = randn(n, rng);
    std::vector<float> ys = y0, yv = y0;
    axpy_scalar(0.37f, x.data(), ys.data(), n);
    axpy_avx2(0.37f, x.data(), yv.data(), n);
    CHECK(ys == yv);
    for (int64_t i = 0; i < n; ++i) CHECK_EQ(ys[size_t(i)], y0[size_t(i)] + 0.37f * x[size_t(i)]);
  }
#endif
}

TEST_CASE("rmsnorm matches the formula in double") {
  std::mt19937 rng(22);
  for (int64_t n : {1, 17, 7168}) {
    std::vector<float> x = randn(n, rng), w = randn(n, rng), out(static_cast<size_t>(n));
    const float eps = 1e-6f;
    rmsnorm(x.data(), w.data(), eps, out.data(), n);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = double(x[size_t(i)]) * inv * w[size_t(i)];
      REQUIRE_LE(std::fabs(out[size_t(i)] - ref), 1e-5 * std::fabs(ref) + 1e-7);
    }
    rmsnorm(x.data(), w.data(), eps, x.data(), n);  // in place gives the same
    for (int64_t i = 0; i < n; ++i) REQUIRE_EQ(x[size_t(i)], out[size_t(i)]);
  }
}
