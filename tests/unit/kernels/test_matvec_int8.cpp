// The int8-activation Q8G/Q4G path (shared/kernels/matvec_int8.h): every SIMD path equals
// the scalar implementation bit for bit, it is exact where int8 activations are, and on
// random data it stays within the error int8 rounding of the activations allows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "shared/kernels/matvec.h"
#include "shared/kernels/matvec_int8.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/half.h"
#include "shared/util/thread_pool.h"

using namespace waste;
using namespace waste::test;

namespace {

struct Int8Shape {
  int64_t rows, cols;
  uint32_t group;
};

// Unit counts that leave partial 4-unit and 16-unit blocks, every group the SIMD paths take
// (32 .. 1024) and two they do not (96: units do not line up with 16-unit blocks; 48). Row
// lengths run each path's prefetch forms (prefetch.h): 2304 columns AVX-512's burst, 32000
// (and the 7168 of the group-128 case below) its spread form, rows over 16 KiB AVX2's spread
// form (32000 at Q8G, 33792 at Q4G). A prefetch has no result of its own: what these check is
// the kernels' bits with each form running, not which form a path chose.
const Int8Shape kInt8Shapes[] = {{1, 32, 32},     {3, 64, 32},     {5, 96, 32},       {7, 224, 32},     {9, 512, 32},
                         {17, 544, 32},   {33, 2304, 32},  {4, 1000 * 32, 32}, {6, 4096, 64},   {5, 640, 128},
                         {3, 768, 256},   {3, 1536, 512},  {2, 3072, 1024},   {5, 96 * 7, 96}, {4, 48 * 5, 48},
                         {3, 33792, 32}};

std::string describe_int8(KernelPath p, TensorFormat f, const Int8Shape& s) {
  return std::string(kernel_path_name(p)) + " " + format_name(f) + " [" + std::to_string(s.rows) + ", " +
         std::to_string(s.cols) + "] group " + std::to_string(s.group);
}

// Gaussian activations with a few outlier channels (x20), as LLM hidden states have.
std::vector<float> realistic_activations(int64_t n, std::mt19937& rng) {
  std::vector<float> x = random_activations(n, rng);
  std::uniform_int_distribution<int> pick(0, 99);
  for (auto& v : x)
    if (pick(rng) == 0) v *= 20.0f;
  return x;
}

// A random matrix of shape s: every path's int8 matmul of each token count in ns gives the
// scalar implementation's bits (the count pooled_n split over the pool).
void require_paths_equal_scalar(TensorFormat f, const Int8Shape& s, std::initializer_list<int64_t> ns, int64_t pooled_n,
                                std::mt19937& rng, ThreadPool& pool) {
  StoredMatrix m = random_matrix(f, s.rows, s.cols, s.group, rng);
  for (int64_t n : ns) {
    std::vector<float> x = realistic_activations(n * s.cols, rng);
    std::vector<float> ref(size_t(n * s.rows));
    matmul_int8_scalar(m.view, x.data(), n, ref.data(), nullptr);
    for (KernelPath p : available_kernel_paths()) {
      INFO(describe_int8(p, f, s), " n ", n);
      std::vector<float> y(ref.size(), -1.0f);
      matmul_path(p, ActivationMode::Int8, m.view, x.data(), n, y.data(), n == pooled_n ? &pool : nullptr);
      REQUIRE_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0);
    }
  }
}

}  // namespace

TEST_CASE("int8: every path and token count gives the scalar implementation's bits") {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  for (TensorFormat f : {TensorFormat::Q8G, TensorFormat::Q4G})
    for (const Int8Shape& s : kInt8Shapes) {
      if (f == TensorFormat::Q4G && s.group % 2) continue;
      // n: 1 (decode), 3 (an odd token pair: SMMLA pairs the last token with itself), 5 (a
      // full token tile and a single), 6 (a full tile and a pair), 16 (one block of the
      // AVX-512 token-lane path), 37 (two blocks and 5 lanes of a third), split over a pool.
      require_paths_equal_scalar(f, s, {1, 3, 5, 6, 16, 37}, 37, rng, pool);
    }
}

TEST_CASE("int8: --trunk-group 128 on random shapes, odd row counts, gives the scalar bits on every path") {
  // The trunk's wide group (shared/model/trunk_storage.h): 4 units of 32 per group, so one
  // 16-unit block spans 4 groups and the scale gather differs from group 32's. Random widths
  // leave partial 16-unit blocks (any number of 128-groups), K3's 7168 is one of them; rows are
  // odd so the last row of a 2-row (SMMLA) or 4-row tile runs alone. K3's dense down
  // projection width (33792) takes AVX2's spread prefetch at this group too (prefetch.h).
  std::mt19937 rng(128);
  ThreadPool pool(3);
  std::uniform_int_distribution<int> groups(1, 40), half_rows(0, 20);
  std::vector<Int8Shape> shapes = {{7, 7168, 128}, {1, 128, 128}, {3, 384, 128}, {3, 33792, 128}};
  for (int i = 0; i < 12; ++i) shapes.push_back({2 * half_rows(rng) + 1, 128 * groups(rng), 128});
  for (TensorFormat f : {TensorFormat::Q4G, TensorFormat::Q8G})
    for (const Int8Shape& s : shapes) require_paths_equal_scalar(f, s, {1, 2, 3, 5, 21}, 21, rng, pool);
}

TEST_CASE("int8: exact where the activations are exact int8 values") {
  // Each activation unit (32 inputs, or the group when it is not a multiple of 32) holds one
  // +-127, so its scale is 1 and q = x; small integer weights with
  // power-of-two scales keep every partial sum exact in f32, whatever the order.
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> small(-4, 4), sign(0, 1);
  for (TensorFormat f : {TensorFormat::Q8G, TensorFormat::Q4G})
    for (const Int8Shape& s : kInt8Shapes) {
      if (f == TensorFormat::Q4G && s.group % 2) continue;
      StoredMatrix m = exact_matrix(f, s.rows, s.cols, s.group, rng);
      if (f == TensorFormat::Q8G) {  // weights in [-8, 8] as for Q4G (exact_matrix draws +-127)
        auto* q = static_cast<int8_t*>(const_cast<void*>(m.view.data));
        for (int64_t i = 0; i < s.rows * s.cols; ++i) q[i] = int8_t(q[i] / 16);
      }
      std::vector<float> x(size_t(s.cols));
      const int64_t unit = s.group % 32 == 0 ? 32 : s.group;
      for (int64_t c = 0; c < s.cols; ++c) x[size_t(c)] = c % unit == 3 % unit ? (sign(rng) ? 127.0f : -127.0f) : float(small(rng));
      std::vector<float> ref(size_t(s.rows));
      matvec_scalar(m.view, x.data(), ref.data(), 0, s.rows);
      for (KernelPath p : available_kernel_paths()) {
        INFO(describe_int8(p, f, s));
        std::vector<float> y(size_t(s.rows), -1.0f);
        matvec_path(p, ActivationMode::Int8, m.view, x.data(), y.data(), nullptr);
        for (int64_t r = 0; r < s.rows; ++r) REQUIRE_EQ(y[size_t(r)], ref[size_t(r)]);
      }
    }
}

TEST_CASE("int8: the error against f32 activations is within int8 rounding of the activations") {
  // |y_int8 - y_f32| <= sum_i |w_i| * (step of x_i's unit of 32) / 2, plus f32 rounding; and
  // the typical error (rms over rows, relative to rms y) is about 1%. The same for a weight
  // group of 128 (--trunk-group 128): activations are scaled per 32 inputs whatever the group.
  std::mt19937 rng(13);
  for (uint32_t wgroup : {32u, 128u})
  for (TensorFormat f : {TensorFormat::Q8G, TensorFormat::Q4G}) {
    const int64_t rows = 256, cols = 2304;
    const uint32_t group = 32;  // the activations' unit
    StoredMatrix m = random_matrix(f, rows, cols, wgroup, rng);
    std::vector<float> x = realistic_activations(cols, rng), y(rows), ref(rows), row(cols);
    matvec_path(best_kernel_path(), ActivationMode::Int8, m.view, x.data(), y.data(), nullptr);
    matvec_scalar(m.view, x.data(), ref.data(), 0, rows);
    std::vector<double> half_step(static_cast<size_t>(cols));
    for (int64_t g = 0; g < cols / group; ++g) {
      double amax = 0;
      for (int64_t i = g * group; i < (g + 1) * group; ++i) amax = std::max(amax, std::fabs(double(x[size_t(i)])));
      for (int64_t i = g * group; i < (g + 1) * group; ++i) half_step[size_t(i)] = amax / 127 / 2;
    }
    double err2 = 0, ref2 = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(m.view, r, row.data());
      double bound = 0, abs_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        bound += std::fabs(double(row[size_t(c)])) * half_step[size_t(c)];
        abs_sum += std::fabs(double(row[size_t(c)]) * x[size_t(c)]);
      }
      const double err = std::fabs(double(y[size_t(r)]) - ref[size_t(r)]);
      INFO(std::string(format_name(f)), " group ", wgroup, " row ", r);
      CHECK_LE(err, bound * 1.001 + 1e-5 * abs_sum);
      err2 += err * err;
      ref2 += double(ref[size_t(r)]) * ref[size_t(r)];
    }
    INFO(std::string(format_name(f)), " group ", wgroup);
    CHECK_LT(std::sqrt(err2 / ref2), 0.02);  // measured 0.6-1.1% (groups holding an outlier are coarse)
  }
}

TEST_CASE("int8: extreme weights and activations overflow no path's integer sums") {
  // The narrowest intermediate is the ARMv8.0 NEON path's 16-bit lanes: Q8G adds two
  // products of up to 128 x 127 (32512), Q4G four of up to 15 x 127 (the nibble q + 8). Every
  // weight at its extreme (-128 / +127, nibble 0 / 15) against activations of +-127 (each
  // group holds a +-127, so q = x) must still give the scalar bits; the row sums reach
  // +-128 x 127 x cols, exact in f32 for these sizes only in int32, not in 16 bits.
  std::mt19937 rng(15);
  std::uniform_int_distribution<int> coin(0, 1);
  for (TensorFormat f : {TensorFormat::Q8G, TensorFormat::Q4G}) {
    const int64_t rows = 6, cols = 544;  // 17 units: a full 16-unit block and one more
    StoredMatrix m = random_matrix(f, rows, cols, 32, rng);
    auto* q = static_cast<uint8_t*>(const_cast<void*>(m.view.data));
    const int64_t bytes = f == TensorFormat::Q8G ? rows * cols : rows * cols / 2;
    for (int64_t i = 0; i < bytes; ++i) {
      // rows 0-1 all one extreme (-128 or nibbles 0 = -8), rows 2-3 the other, rows 4-5 mixed
      const int64_t r = i / (bytes / rows);
      const bool low = r < 2 || (r >= 4 && coin(rng));
      q[i] = f == TensorFormat::Q8G ? uint8_t(low ? 0x80 : 0x7f) : uint8_t(low ? 0x00 : 0xff);
    }
    for (int64_t n : {1, 2, 5, 18}) {
      std::vector<float> x(size_t(n * cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 7) % 3 == 0 ? 127.0f : -127.0f;
      for (int64_t t = 0; t < n; ++t)  // one token all +127, against rows of one sign: the largest sums
        if (t == 1) std::fill(x.begin() + t * cols, x.begin() + (t + 1) * cols, 127.0f);
      std::vector<float> ref(size_t(n * rows));
      matmul_int8_scalar(m.view, x.data(), n, ref.data(), nullptr);
      for (KernelPath p : available_kernel_paths()) {
        INFO(kernel_path_name(p), " ", format_name(f), " n ", n);
        std::vector<float> y(ref.size(), -1.0f);
        matmul_path(p, ActivationMode::Int8, m.view, x.data(), n, y.data(), nullptr);
        REQUIRE_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0);
      }
    }
  }
}

TEST_CASE("int8: zero activations give +0, a non-finite one gives NaN") {
  std::mt19937 rng(14);
  for (TensorFormat f : {TensorFormat::Q8G, TensorFormat::Q4G}) {
    StoredMatrix m = random_matrix(f, 5, 640, 32, rng);
    std::vector<float> x(640, 0.0f), y(5);
    for (KernelPath p : available_kernel_paths()) {
      INFO(kernel_path_name(p), " ", format_name(f));
      x.assign(640, 0.0f);
      matvec_path(p, ActivationMode::Int8, m.view, x.data(), y.data(), nullptr);
      for (float v : y) CHECK_EQ(f32_to_bits(v), 0u);
      x[600] = std::numeric_limits<float>::infinity();
      matvec_path(p, ActivationMode::Int8, m.view, x.data(), y.data(), nullptr);
      for (float v : y) CHECK(std::isnan(v));
      x[600] = std::numeric_limits<float>::quiet_NaN();
      matvec_path(p, ActivationMode::Int8, m.view, x.data(), y.data(), nullptr);
      for (float v : y) CHECK(std::isnan(v));
    }
    // The same in a matmul of 17 tokens (the token-lane path): token 3 all zero, token 9
    // with an infinity, token 16 with a NaN; the others must not be touched by them.
    const int64_t n = 17;
    std::vector<float> xs = realistic_activations(n * 640, rng);
    std::fill(xs.begin() + 3 * 640, xs.begin() + 4 * 640, 0.0f);
    xs[9 * 640 + 17] = std::numeric_limits<float>::infinity();
    xs[16 * 640 + 639] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> ref(size_t(n * 5));
    matmul_int8_scalar(m.view, xs.data(), n, ref.data(), nullptr);
    for (KernelPath p : available_kernel_paths()) {
      INFO(kernel_path_name(p), " ", format_name(f), " n 17");
      std::vector<float> ys(ref.size(), -1.0f);
      matmul_path(p, ActivationMode::Int8, m.view, xs.data(), n, ys.data(), nullptr);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < 5; ++r) {
          const float v = ys[size_t(t * 5 + r)];
          if (t == 3) CHECK_EQ(f32_to_bits(v), 0u);
          else if (t == 9 || t == 16) CHECK(std::isnan(v));
          else CHECK_EQ(f32_to_bits(v), f32_to_bits(ref[size_t(t * 5 + r)]));
        }
    }
  }
}

TEST_CASE("int8: activations are quantized per unit as documented") {
  const float x[8] = {1.0f, -2.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  Int8Activations a;
  quantize_activations(x, 1, 8, 4, Int8Layout::Natural, a);
  CHECK_EQ(a.unit, 4);  // group not a multiple of 32: a unit is a group
  CHECK_EQ(a.units, 2);
  CHECK_EQ(a.padded_units, 16);
  CHECK_EQ(a.unit_scale[0], 2.0f / 127.0f);
  CHECK_EQ(a.unit_scale[1], 0.0f);
  // 1 * 63.5 -> 64 (half to even), -2 -> -127, 0.5 * 63.5 = 31.75 -> 32.
  CHECK_EQ(int(a.q[0]), 64);
  CHECK_EQ(int(a.q[1]), -127);
  CHECK_EQ(int(a.q[2]), 32);
  CHECK_EQ(a.unit_sum[0], 64 - 127 + 32);
  CHECK_EQ(a.unit_sum[1], 0);
  // EvenOdd: per 128 columns the evens then the odds; a last block of 2 units 32 + 32.
  std::vector<float> wide(192);
  for (int c = 0; c < 192; ++c) wide[size_t(c)] = float(c % 100) - 50.0f;
  Int8Activations nat, eo;
  quantize_activations(wide.data(), 1, 192, 32, Int8Layout::Natural, nat);
  quantize_activations(wide.data(), 1, 192, 32, Int8Layout::EvenOdd, eo);
  for (int j = 0; j < 64; ++j) {
    CHECK_EQ(eo.q[size_t(j)], nat.q[size_t(2 * j)]);
    CHECK_EQ(eo.q[size_t(64 + j)], nat.q[size_t(2 * j + 1)]);
  }
  for (int j = 0; j < 32; ++j) {
    CHECK_EQ(eo.q[size_t(128 + j)], nat.q[size_t(128 + 2 * j)]);
    CHECK_EQ(eo.q[size_t(160 + j)], nat.q[size_t(128 + 2 * j + 1)]);
  }
  // A weight group of 128 still scales the activations per 32 inputs: an outlier in the first
  // 32 does not coarsen the next 96.
  std::vector<float> outlier(128, 1.0f);
  outlier[0] = 100.0f;
  Int8Activations g128;
  quantize_activations(outlier.data(), 1, 128, 128, Int8Layout::Natural, g128);
  CHECK_EQ(g128.unit, 32);
  CHECK_EQ(g128.units, 4);
  CHECK_EQ(g128.unit_scale[0], 100.0f / 127.0f);
  for (int k = 1; k < 4; ++k) CHECK_EQ(g128.unit_scale[size_t(k)], 1.0f / 127.0f);
  CHECK_EQ(int(g128.q[1]), 1);    // 1 * 127/100 = 1.27 -> 1 in the outlier's unit
  CHECK_EQ(int(g128.q[32]), 127);  // exact in the others
  CHECK_EQ(g128.unit_sum[1], 32 * 127);
}

TEST_CASE("int8: every path's activation quantizer gives the definition's bits, on the pool too") {
  std::mt19937 rng(77);
  const int64_t cols = 2368, units = cols / 32;  // 18.5 blocks of 128: a partial EvenOdd block
  std::vector<float> x = realistic_activations(37 * cols, rng);
  // Units the definition treats apart: all zero, one inf, one NaN, -0 only, a largest value so
  // small that 127 / amax is inf (0 * inf is NaN: -127), and exact half steps (ties to even).
  auto unit = [&](int64_t t, int64_t k) { return &x[size_t(t * cols + k * 32)]; };
  std::fill_n(unit(0, 1), 32, 0.0f);
  unit(0, 2)[5] = std::numeric_limits<float>::infinity();
  unit(0, 3)[31] = std::numeric_limits<float>::quiet_NaN();
  std::fill_n(unit(0, 4), 32, -0.0f);
  std::fill_n(unit(0, 5), 32, 0.0f);
  unit(0, 5)[7] = 1e-40f;
  unit(0, 5)[8] = -1e-40f;
  // amax 127 (the first value): the others, -14.5 .. 15.5 in steps of 1, are exact ties.
  for (int i = 0; i < 32; ++i) unit(1, 0)[i] = float(i - 16) + 0.5f;
  unit(1, 0)[0] = 127.0f;
  std::vector<QuantizeUnitsFn> fns;
#if defined(__x86_64__)
  if (kernel_path_available(KernelPath::Avx512)) fns.push_back(quantize_units_avx512);
#endif
  Int8Activations ref;
  for (Int8Layout layout : {Int8Layout::Natural, Int8Layout::EvenOdd}) {
    quantize_activations(x.data(), 37, cols, 64, layout, ref);
    CHECK(std::isnan(ref.unit_scale[2]));
    CHECK(std::isnan(ref.unit_scale[3]));
    CHECK_EQ(ref.unit_scale[1], 0.0f);
    CHECK_EQ(ref.unit_scale[4], 0.0f);
    ThreadPool pool(3);
    fns.push_back(quantize_units_scalar);  // the definition on the pool
    for (QuantizeUnitsFn fn : fns)
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        Int8Activations got;
        // Stale contents must all be overwritten, the padding units' scales and sums included.
        got.q.assign(size_t(37 * cols), 99);
        got.unit_scale.assign(size_t(37 * 80), 5.0f);
        got.unit_sum.assign(size_t(37 * 80), 7);
        quantize_activations(x.data(), 37, cols, 64, layout, got, fn, p);
        REQUIRE_EQ(got.units, units);
        REQUIRE_EQ(got.padded_units, 80);
        CHECK(got.q == ref.q);
        CHECK(got.unit_sum == ref.unit_sum);
        REQUIRE_EQ(got.unit_scale.size(), ref.unit_scale.size());
        for (size_t i = 0; i < ref.unit_scale.size(); ++i)
          CHECK_EQ(f32_to_bits(got.unit_scale[i]), f32_to_bits(ref.unit_scale[i]));
      }
    fns.pop_back();
  }
  // The tiny unit: 1e-40 * inf = inf -> 127, its zeros 0 * inf = NaN -> -127, as defined.
  Int8Activations nat;
  quantize_activations(x.data(), 1, cols, 64, Int8Layout::Natural, nat);
  CHECK_EQ(int(nat.q[size_t(5 * 32 + 7)]), 127);
  CHECK_EQ(int(nat.q[size_t(5 * 32 + 8)]), -127);
  CHECK_EQ(int(nat.q[size_t(5 * 32 + 0)]), -127);
}
