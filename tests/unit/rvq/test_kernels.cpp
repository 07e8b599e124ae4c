#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/rvq/encoder.h"
#include "shared/rvq/kernels.h"
#include "shared/util/cpu.h"
#include "shared/util/error.h"
#include "shared/util/half.h"
#include "shared/util/thread_pool.h"

using namespace waste;

namespace {

std::vector<float> gaussian(size_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A random VQ3R matrix: random codes (padding rows too: kernels must ignore them), f16 scales.
struct Matrix {
  int rows, cols;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<float> dense;  // decoded
};

Matrix random_matrix(int rows, int cols, const float* books, uint64_t seed) {
  Matrix m{rows, cols, std::vector<uint8_t>(vq3r_code_bytes(rows, cols)), std::vector<uint16_t>(size_t(rows)), {}};
  std::mt19937_64 rng(seed);
  for (auto& c : m.codes) c = uint8_t(rng());
  std::uniform_real_distribution<float> u(0.01f, 0.05f);
  for (auto& s : m.scales) s = f32_to_f16(u(rng));
  m.dense.resize(size_t(rows) * cols);
  decode_matrix(m.codes.data(), m.scales.data(), rows, cols, books, m.dense.data());
  return m;
}

std::vector<double> reference(const std::vector<float>& w, int rows, int cols, const float* x) {
  std::vector<double> y(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    double a = 0;
    for (int c = 0; c < cols; ++c) a += double(w[size_t(r) * cols + c]) * x[c];
    y[size_t(r)] = a;
  }
  return y;
}

double rel_err(const float* y, const std::vector<double>& ref) {
  double e = 0, s = 0;
  for (size_t i = 0; i < ref.size(); ++i) { e += (y[i] - ref[i]) * (y[i] - ref[i]); s += ref[i] * ref[i]; }
  return std::sqrt(e / s);
}

bool have_avx2() { return simd_level() == SimdLevel::Avx2 || simd_level() == SimdLevel::Avx512; }

// The SIMD paths of this CPU (under the WASTE_SIMD cap) that must equal the scalar reference
// bit for bit: the table-lookup paths, AVX-512 (VBMI) on x86 and NEON (TBL/TBX) on aarch64.
// AVX2 decodes instead and is checked against the decoded weights.
std::vector<SimdLevel> exact_lut_levels() {
  if (simd_level() == SimdLevel::Avx512 || simd_level() == SimdLevel::Neon) return {simd_level()};
  return {};
}

// Codebooks with the energy split of a trained RVQ (later stages smaller).
std::vector<float> books_like_trained(uint64_t seed) {
  std::vector<float> b = gaussian(kCodebookFloats, seed);
  for (size_t i = 0; i < b.size(); ++i) b[i] *= i < 2048 ? 0.8f : i < 4096 ? 0.35f : 0.17f;
  return b;
}

}  // namespace

TEST_CASE("lut kernels: SIMD paths against the scalar reference on odd shapes") {
  std::vector<float> books = books_like_trained(11);
  const int shapes[][2] = {{1, 8}, {63, 64}, {64, 72}, {65, 256}, {200, 136}, {300, 520}, {513, 64}};
  uint64_t seed = 100;
  double worst_q = 0;
  for (const auto& sh : shapes) {
    const int rows = sh[0], cols = sh[1];
    CAPTURE(rows);
    CAPTURE(cols);
    Matrix m = random_matrix(rows, cols, books.data(), ++seed);
    const int n = 3;
    std::vector<float> xs = gaussian(size_t(n) * cols, ++seed);
    std::vector<RvqTables> ts(n), tsimd(n), ts2(n);
    std::vector<const RvqTables*> p(n), psimd(n), p2(n);
    for (int i = 0; i < n; ++i) {
      build_tables_at(SimdLevel::Scalar, &xs[size_t(i) * cols], cols, books.data(), ts[size_t(i)]);
      p[size_t(i)] = &ts[size_t(i)];
    }
    const int tiles = (rows + 63) / 64;
    std::vector<float> y(size_t(n) * rows, -1.0f);
    rvq_matmul_at(SimdLevel::Scalar, m.codes.data(), m.scales.data(), rows, cols, p.data(), n, y.data(), size_t(rows), 0, tiles);
    for (int i = 0; i < n; ++i) {
      std::vector<double> ref = reference(m.dense, rows, cols, &xs[size_t(i) * cols]);
      double e = rel_err(&y[size_t(i) * rows], ref);
      // int8 table quantisation costs ~1.5% of the output (one output alone can be near 0).
      if (rows < 16) continue;
      worst_q = std::max(worst_q, e);
      CHECK(e < 0.03);
    }
    for (SimdLevel level : exact_lut_levels()) {
      CAPTURE(std::string(simd_level_name(level)));
      for (int i = 0; i < n; ++i) {
        build_tables_at(level, &xs[size_t(i) * cols], cols, books.data(), tsimd[size_t(i)]);
        CHECK(tsimd[size_t(i)].q == ts[size_t(i)].q);
        CHECK(tsimd[size_t(i)].block_scale == ts[size_t(i)].block_scale);
        psimd[size_t(i)] = &tsimd[size_t(i)];
      }
      std::vector<float> ysimd(y.size(), -2.0f);
      rvq_matmul_at(level, m.codes.data(), m.scales.data(), rows, cols, psimd.data(), n, ysimd.data(), size_t(rows), 0, tiles);
      CHECK(std::memcmp(ysimd.data(), y.data(), y.size() * 4) == 0);
    }
    if (have_avx2()) {
      for (int i = 0; i < n; ++i) {
        build_tables_at(SimdLevel::Avx2, &xs[size_t(i) * cols], cols, books.data(), ts2[size_t(i)]);
        p2[size_t(i)] = &ts2[size_t(i)];
      }
      std::vector<float> y2(y.size(), -3.0f);
      rvq_matmul_at(SimdLevel::Avx2, m.codes.data(), m.scales.data(), rows, cols, p2.data(), n, y2.data(), size_t(rows), 0, tiles);
      for (int i = 0; i < n; ++i)
        CHECK(rel_err(&y2[size_t(i) * rows], reference(m.dense, rows, cols, &xs[size_t(i) * cols])) < 1e-5);
    }
  }
  MESSAGE("worst relative output error of int8 tables: " << worst_q);
}

TEST_CASE("lut kernels: the dispatched path equals the scalar bit for bit on random shapes, n and tile ranges") {
  // Which path this run exercises (WASTE_SIMD and QEMU_CPU change it): the log says.
  MESSAGE("RVQ kernel path: " << std::string(simd_level_name(simd_level())) << "; " << cpu_summary());
#if defined(__aarch64__)
  // Every ARMv8-A Linux CPU has Advanced SIMD: unless WASTE_SIMD=scalar, NEON must be chosen.
  if (cpu_features().neon && simd_level() != SimdLevel::Scalar) CHECK(simd_level() == SimdLevel::Neon);
#endif
  std::vector<float> books = books_like_trained(14);
  std::mt19937_64 rng(77);
  const int row_choices[] = {1, 2, 3, 15, 16, 17, 31, 33, 63, 64, 65, 100, 128, 129, 191, 257};
  const int col_choices[] = {8, 16, 24, 56, 64, 72, 120, 128, 136, 200, 264};
  const int n_choices[] = {1, 2, 3, 8, 70};  // 70: more tokens than a kernel's chunk of 64
  int cases = 0;
  for (int iter = 0; iter < 24; ++iter) {
    const int rows = row_choices[rng() % std::size(row_choices)];
    const int cols = col_choices[rng() % std::size(col_choices)];
    const int n = n_choices[iter % std::size(n_choices)];
    CAPTURE(rows);
    CAPTURE(cols);
    CAPTURE(n);
    Matrix m = random_matrix(rows, cols, books.data(), rng());
    std::vector<float> xs = gaussian(size_t(n) * cols, rng(), 2.0f);
    std::vector<RvqTables> ts(static_cast<size_t>(n)), td(static_cast<size_t>(n));
    std::vector<const RvqTables*> p(static_cast<size_t>(n)), pd(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      build_tables_at(SimdLevel::Scalar, &xs[size_t(i) * cols], cols, books.data(), ts[size_t(i)]);
      build_tables(&xs[size_t(i) * cols], cols, books.data(), td[size_t(i)]);
      p[size_t(i)] = &ts[size_t(i)];
      pd[size_t(i)] = &td[size_t(i)];
    }
    const int tiles = (rows + 63) / 64;
    // Padding (rows of y past `rows` and a wider stride) must stay untouched.
    const size_t stride = size_t(rows) + 5;
    std::vector<float> ys(size_t(n) * stride, -1.0f);
    rvq_matmul_at(SimdLevel::Scalar, m.codes.data(), m.scales.data(), rows, cols, p.data(), n, ys.data(), stride, 0, tiles);
    if (simd_level() != SimdLevel::Avx2) {  // AVX2 decodes: checked against the weights above
      std::vector<float> yd(ys.size(), -1.0f);
      rvq_matmul(m.codes.data(), m.scales.data(), rows, cols, pd.data(), n, yd.data(), stride);
      for (int i = 0; i < n; ++i) CHECK(td[size_t(i)].q == ts[size_t(i)].q);
      CHECK(std::memcmp(yd.data(), ys.data(), ys.size() * 4) == 0);
    }
    for (SimdLevel level : exact_lut_levels()) {
      CAPTURE(std::string(simd_level_name(level)));
      // The tiles in two ranges, as the thread pool splits them.
      const int split = int(rng() % uint64_t(tiles + 1));
      std::vector<float> yl(ys.size(), -1.0f);
      rvq_matmul_at(level, m.codes.data(), m.scales.data(), rows, cols, p.data(), n, yl.data(), stride, 0, split);
      rvq_matmul_at(level, m.codes.data(), m.scales.data(), rows, cols, p.data(), n, yl.data(), stride, split, tiles);
      CHECK(std::memcmp(yl.data(), ys.data(), ys.size() * 4) == 0);
      ++cases;
    }
  }
  MESSAGE(cases << " shape cases compared with the scalar on a SIMD LUT path");
  if (!exact_lut_levels().empty()) CHECK(cases == 24);
}

TEST_CASE("build_tables: every path rounds ties to even and gives a zero block scale 0 and the bias") {
  // Integer-valued books and x make every table entry an exact integer f whatever the order of
  // the adds; one entry of 254 makes the scale 127/254 = 0.5, so odd entries land on ties.
  std::vector<float> books(kCodebookFloats);
  std::mt19937_64 rng(5);
  for (auto& b : books) b = float(int(rng() % 15) - 7) / 8.0f;  // |entry . x| <= 56 < 254
  for (int d = 0; d < kVqDim; ++d) books[size_t(d)] = 31.75f;      // stage 0, entry 0: 8 * 31.75 = 254
  const int cols = 2 * kLutBlockVectors * kVqDim;                  // two blocks; the second x = 0
  std::vector<float> x(size_t(cols), 0.0f);
  for (int c = 0; c < cols / 2; ++c) x[size_t(c)] = 1.0f;
  std::vector<SimdLevel> levels = {SimdLevel::Scalar};
  for (SimdLevel l : exact_lut_levels()) levels.push_back(l);
  for (SimdLevel level : levels) {
    CAPTURE(std::string(simd_level_name(level)));
    RvqTables t;
    build_tables_at(level, x.data(), cols, books.data(), t);
    REQUIRE(t.block_scale.size() == 2);
    CHECK(t.block_scale[0] == 2.0f);
    CHECK(t.block_scale[1] == 0.0f);
    int ties = 0;
    for (int g = 0; g < kLutBlockVectors; ++g)  // the first block: every position has x = 1
      for (int s = 0; s < kVqStages; ++s)
        for (int j = 0; j < kVqEntries; ++j) {
          float f = 0;
          for (int d = 0; d < kVqDim; ++d) f += books[(size_t(s) * kVqEntries + j) * kVqDim + d];
          const long fi = std::lround(f * 8.0f);  // entries are multiples of 1/8
          const int got = t.q[(size_t(g) * kVqStages + s) * kVqEntries + j];
          if (fi % 8 == 0 && (fi / 8) % 2 != 0) {  // an odd integer: f / 2 is a tie
            ++ties;
            const long half = fi / 8 / 2 + ((fi / 8) > 0 ? ((fi / 8 / 2) % 2 != 0) : -((fi / 8 / 2) % 2 != 0));
            CHECK(got == 128 + half);
          }
          CHECK(got == 128 + int(std::nearbyint(f * 0.5f)));
        }
    CHECK(ties > 100);  // the rule above was exercised, not vacuous
    for (size_t k = size_t(kLutBlockVectors) * kVqStages * kVqEntries; k < t.q.size(); ++k) REQUIRE(t.q[k] == 128);
  }
}

TEST_CASE("rvq_matvec: thread count and batching do not change a bit") {
  std::vector<float> books = books_like_trained(12);
  const int rows = 700, cols = 264;
  Matrix m = random_matrix(rows, cols, books.data(), 5);
  const int n = 4;
  std::vector<float> xs = gaussian(size_t(n) * cols, 6);
  std::vector<RvqTables> ts(n);
  std::vector<const RvqTables*> p(n);
  for (int i = 0; i < n; ++i) {
    build_tables(&xs[size_t(i) * cols], cols, books.data(), ts[size_t(i)]);
    p[size_t(i)] = &ts[size_t(i)];
  }
  std::vector<float> batch(size_t(n) * rows), single(size_t(n) * rows), threaded(size_t(n) * rows);
  rvq_matmul(m.codes.data(), m.scales.data(), rows, cols, p.data(), n, batch.data(), size_t(rows));
  ThreadPool pool(3);
  for (int i = 0; i < n; ++i) {
    rvq_matvec(m.codes.data(), m.scales.data(), rows, cols, ts[size_t(i)], &single[size_t(i) * rows]);
    rvq_matvec(m.codes.data(), m.scales.data(), rows, cols, ts[size_t(i)], &threaded[size_t(i) * rows], &pool);
  }
  CHECK(std::memcmp(batch.data(), single.data(), batch.size() * 4) == 0);
  CHECK(std::memcmp(threaded.data(), single.data(), batch.size() * 4) == 0);
  RvqTables wrong;
  build_tables(xs.data(), 256, books.data(), wrong);
  std::vector<float> y(static_cast<size_t>(rows));
  CHECK_THROWS_AS(rvq_matvec(m.codes.data(), m.scales.data(), rows, cols, wrong, y.data()), Error);
}

TEST_CASE("build_tables_batch: a pool builds the same tables as one build_tables per input") {
  std::vector<float> books = books_like_trained(14);
  // 35 positions: 5 blocks, the last one short; 6 inputs spread over 3 threads in chunks.
  const int cols = 280, n = 6;
  std::vector<float> xs = gaussian(size_t(n) * cols, 15);
  xs[7] = 0;  // some zero and some large values: the scales differ per block
  for (int k = 0; k < cols; ++k) xs[size_t(2 * cols + k)] = 0.0f;
  xs[size_t(3 * cols + 9)] = 1e4f;
  ThreadPool pool(3);
  std::vector<RvqTables> one(n), batch(n);
  std::vector<const float*> in(n);
  std::vector<RvqTables*> out(n);
  for (int i = 0; i < n; ++i) {
    build_tables(&xs[size_t(i) * cols], cols, books.data(), one[size_t(i)]);
    in[size_t(i)] = &xs[size_t(i) * cols];
    out[size_t(i)] = &batch[size_t(i)];
  }
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (auto& t : batch) t = RvqTables{};
    build_tables_batch(in.data(), cols, books.data(), out.data(), n, p);
    for (int i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(batch[size_t(i)].q.size() == one[size_t(i)].q.size());
      CHECK(batch[size_t(i)].q == one[size_t(i)].q);
      CHECK(batch[size_t(i)].block_scale == one[size_t(i)].block_scale);
      CHECK(batch[size_t(i)].cols == cols);
      CHECK(batch[size_t(i)].books == books.data());
    }
  }
  // The expert form: gate and up tables of each input, as build_expert_tables gives them.
  std::vector<float> layer(3 * kCodebookFloats);
  for (int k = 0; k < 3; ++k) std::copy(books.begin(), books.end(), layer.begin() + k * kCodebookFloats);
  for (size_t j = 0; j < layer.size(); j += 7) layer[j] *= 1.5f;  // three different books
  std::vector<ExpertTables> e_one(n), e_batch(n);
  std::vector<ExpertTables*> e_out(n);
  for (int i = 0; i < n; ++i) {
    build_expert_tables(in[size_t(i)], cols, layer.data(), e_one[size_t(i)]);
    e_out[size_t(i)] = &e_batch[size_t(i)];
  }
  build_expert_tables_batch(in.data(), n, cols, layer.data(), e_out.data(), &pool);
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(e_batch[size_t(i)].gate.q == e_one[size_t(i)].gate.q);
    CHECK(e_batch[size_t(i)].up.q == e_one[size_t(i)].up.q);
    CHECK(e_batch[size_t(i)].up.block_scale == e_one[size_t(i)].up.block_scale);
    CHECK(e_batch[size_t(i)].x == e_one[size_t(i)].x);
    CHECK(e_batch[size_t(i)].codebooks == layer.data());
  }
}

TEST_CASE("activations") {
  ExpertActivation silu;
  CHECK(activate(silu, 1.0f, 2.0f) == doctest::Approx(2.0 * 1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
  CHECK(activate(silu, -3.0f, 0.5f) == doctest::Approx(0.5 * -3.0 / (1.0 + std::exp(3.0))).epsilon(1e-6));
  ExpertActivation situ;
  situ.kind = ExpertActivation::Kind::SiTU;
  auto ref = [](double g, double u) {
    return (4.0 * std::tanh(g / 4.0) / (1.0 + std::exp(-g))) * (25.0 * std::tanh(u / 25.0));
  };
  for (double g : {-9.0, -1.0, 0.3, 2.0, 12.0})
    for (double u : {-60.0, -0.5, 1.5, 40.0}) CHECK(activate(situ, float(g), float(u)) == doctest::Approx(ref(g, u)).epsilon(1e-5));
  // SiTU saturates: |h| <= 4 * 25.
  CHECK(std::fabs(activate(situ, 1e4f, 1e4f)) <= 100.0f);
}

TEST_CASE("apply_expert: VQ3R and F32/BF16 experts against a float reference; batch == per token") {
  // 9 and 5 row tiles, the last ones partial: several groups of 4 tiles for a pool to split.
  const int H = 552, I = 264;
  std::vector<float> layer(3 * kCodebookFloats);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> b = books_like_trained(20 + uint64_t(k));
    std::copy(b.begin(), b.end(), layer.begin() + k * long(kCodebookFloats));
  }
  Matrix g = random_matrix(I, H, layer.data(), 31), u = random_matrix(I, H, layer.data() + kCodebookFloats, 32),
         d = random_matrix(H, I, layer.data() + 2 * kCodebookFloats, 33);
  ExpertView v;
  v.format = TensorFormat::VQ3R;
  v.hidden = H;
  v.intermediate = I;
  v.gate = g.codes.data();
  v.up = u.codes.data();
  v.down = d.codes.data();
  v.gate_scales = g.scales.data();
  v.up_scales = u.scales.data();
  v.down_scales = d.scales.data();
  v.codebooks = layer.data();
  ExpertActivation act;
  act.kind = ExpertActivation::Kind::SiTU;
  const int n = 3;
  std::vector<float> xs = gaussian(size_t(n) * H, 40, 3.0f);
  const float weights[n] = {0.5f, 1.25f, -0.75f};
  std::vector<ExpertTables> ts(n);
  std::vector<const ExpertTables*> p(n);
  for (int i = 0; i < n; ++i) {
    build_expert_tables(&xs[size_t(i) * H], H, layer.data(), ts[size_t(i)]);
    p[size_t(i)] = &ts[size_t(i)];
  }
  // Float reference on the decoded weights.
  std::vector<std::vector<double>> ref(n);
  for (int i = 0; i < n; ++i) {
    std::vector<double> gy = reference(g.dense, I, H, &xs[size_t(i) * H]), uy = reference(u.dense, I, H, &xs[size_t(i) * H]);
    std::vector<float> h(static_cast<size_t>(I));
    for (int k = 0; k < I; ++k) h[size_t(k)] = activate(act, float(gy[size_t(k)]), float(uy[size_t(k)]));
    ref[size_t(i)] = reference(d.dense, H, I, h.data());
    for (auto& r : ref[size_t(i)]) r *= weights[i];
  }
  ExpertScratch scratch;
  std::vector<float> single(size_t(n) * H, 0.0f), batch(size_t(n) * H, 0.0f);
  for (int i = 0; i < n; ++i) apply_expert(v, ts[size_t(i)], weights[i], act, scratch, &single[size_t(i) * H]);
  apply_expert_batch(v, p.data(), weights, n, act, scratch, batch.data());
  CHECK(std::memcmp(single.data(), batch.data(), single.size() * 4) == 0);
  // On a pool (work split by groups of row tiles, the activation and the weighted sum in the
  // workers): the same bits, alone and batched.
  {
    ThreadPool pool(3);
    std::vector<float> single_pool(size_t(n) * H, 0.0f), batch_pool(size_t(n) * H, 0.0f);
    for (int i = 0; i < n; ++i)
      apply_expert(v, ts[size_t(i)], weights[i], act, scratch, &single_pool[size_t(i) * H], &pool);
    apply_expert_batch(v, p.data(), weights, n, act, scratch, batch_pool.data(), &pool);
    CHECK(std::memcmp(single.data(), single_pool.data(), single.size() * 4) == 0);
    CHECK(std::memcmp(single.data(), batch_pool.data(), single.size() * 4) == 0);
  }
  for (int i = 0; i < n; ++i) CHECK(rel_err(&single[size_t(i) * H], ref[size_t(i)]) < 0.05);
  // Tables from another layer's books are refused.
  ExpertTables other;
  std::vector<float> layer2 = layer;
  build_expert_tables(xs.data(), H, layer2.data(), other);
  CHECK_THROWS_AS(apply_expert(v, other, 1.0f, act, scratch, single.data()), Error);

  // The same expert stored lossless (F32 and BF16) through the same entry point.
  for (TensorFormat f : {TensorFormat::F32, TensorFormat::BF16}) {
    CAPTURE(format_name(f));
    auto store = [&](const std::vector<float>& w) {
      std::vector<uint8_t> out;
      if (f == TensorFormat::F32) {
        out.resize(w.size() * 4);
        std::memcpy(out.data(), w.data(), out.size());
      } else {
        out.resize(w.size() * 2);
        for (size_t k = 0; k < w.size(); ++k) {
          uint16_t b = f32_to_bf16(w[k]);
          std::memcpy(&out[k * 2], &b, 2);
        }
      }
      return out;
    };
    std::vector<uint8_t> gb = store(g.dense), ub = store(u.dense), db = store(d.dense);
    ExpertView lv;
    lv.format = f;
    lv.hidden = H;
    lv.intermediate = I;
    lv.gate = gb.data();
    lv.up = ub.data();
    lv.down = db.data();
    ExpertTables lt;
    build_expert_tables(xs.data(), H, nullptr, lt);
    std::vector<float> y(static_cast<size_t>(H), 0.0f);
    apply_expert(lv, lt, weights[0], act, scratch, y.data());
    CHECK(rel_err(y.data(), ref[0]) < (f == TensorFormat::F32 ? 1e-5 : 2e-2));
  }
}

TEST_CASE("build_tables: new books in a reused buffer give new tables (no stale transposed books)") {
  const int cols = 64;
  const std::vector<float> x = gaussian(size_t(cols), 11);
  const std::vector<float> books_a = gaussian(kCodebookFloats, 12, 0.1f);
  const std::vector<float> books_b = gaussian(kCodebookFloats, 13, 0.1f);
  RvqTables fresh_b;
  build_tables_at(SimdLevel::Scalar, x.data(), cols, books_b.data(), fresh_b);

  std::vector<float> buffer = books_a;  // one address, two sets of books
  RvqTables first, second;
  build_tables_at(SimdLevel::Scalar, x.data(), cols, buffer.data(), first);
  std::memcpy(buffer.data(), books_b.data(), kCodebookFloats * sizeof(float));
  build_tables_at(SimdLevel::Scalar, x.data(), cols, buffer.data(), second);
  CHECK(first.q != fresh_b.q);
  CHECK(second.q == fresh_b.q);
  CHECK(second.block_scale == fresh_b.block_scale);
}
