#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/rvq/book_search.h"
#include "shared/rvq/encoder.h"
#include "shared/util/cpu.h"
#include "shared/util/error.h"
#include "shared/util/half.h"

using namespace waste;

namespace {

std::vector<float> gaussian_weights(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

RvqOptions quick() {
  RvqOptions o;
  o.kmeans_iters = 4;
  o.train_refine_passes = 1;
  return o;
}

}  // namespace

TEST_CASE("nearest-entry search: every SIMD path returns the scalar index and score") {
  std::vector<float> books = gaussian_weights(kCodebookFloats, 3);
  rvq_detail::PreparedBooks pb;
  rvq_detail::prepare_books(books.data(), pb);
  std::vector<float> q = gaussian_weights(8 * 200, 4);
  const CpuFeatures& f = cpu_features();
  for (int i = 0; i < 200; ++i) {
    float s0;
    int j0 = rvq_detail::nearest_scalar(&q[size_t(i) * 8], pb.stage[i % 3], &s0);
    // The scalar argmin is the true nearest entry by Euclidean distance (up to rounding).
    double best = 1e300;
    for (int j = 0; j < 256; ++j) {
      double e = 0;
      for (int d = 0; d < 8; ++d) { double t = q[size_t(i) * 8 + d] - pb.stage[i % 3].rows[j][d]; e += t * t; }
      best = std::min(best, e);
    }
    double e0 = 0;
    for (int d = 0; d < 8; ++d) { double t = q[size_t(i) * 8 + d] - pb.stage[i % 3].rows[j0][d]; e0 += t * t; }
    CHECK(e0 <= best + 1e-4);
#if defined(__x86_64__)
    if (f.avx2 && f.fma) {
      float s1;
      CHECK(rvq_detail::nearest_avx2(&q[size_t(i) * 8], pb.stage[i % 3], &s1) == j0);
      CHECK(s1 == s0);
    }
    if (f.avx512f && f.avx512bw) {
      float s2;
      CHECK(rvq_detail::nearest_avx512(&q[size_t(i) * 8], pb.stage[i % 3], &s2) == j0);
      CHECK(s2 == s0);
    }
#elif defined(__aarch64__)
    if (f.neon) {
      float s3;
      CHECK(rvq_detail::nearest_neon(&q[size_t(i) * 8], pb.stage[i % 3], &s3) == j0);
      CHECK(s3 == s0);
      alignas(64) float a[256], b[256];
      rvq_detail::scores_scalar(&q[size_t(i) * 8], pb.stage[i % 3], a);
      rvq_detail::scores_neon(&q[size_t(i) * 8], pb.stage[i % 3], b);
      CHECK(std::memcmp(a, b, sizeof a) == 0);
    }
#endif
  }
  // Equal scores go to the lowest index on every path: entry 3 copied to 7 (the same lane of
  // the next 4- or 8-wide step), 130 and 255 (other lanes); the query is entry 3 itself.
  std::vector<float> dup = books;
  for (int j : {7, 130, 255}) std::copy(dup.begin() + 3 * 8, dup.begin() + 4 * 8, dup.begin() + j * 8);
  rvq_detail::PreparedBooks pd;
  rvq_detail::prepare_books(dup.data(), pd);
  const float* q3 = &dup[3 * 8];
  CHECK(rvq_detail::nearest_scalar(q3, pd.stage[0], nullptr) == 3);
  CHECK(rvq_detail::nearest_fn()(q3, pd.stage[0], nullptr) == 3);
#if defined(__x86_64__)
  if (f.avx2 && f.fma) CHECK(rvq_detail::nearest_avx2(q3, pd.stage[0], nullptr) == 3);
  if (f.avx512f && f.avx512bw) CHECK(rvq_detail::nearest_avx512(q3, pd.stage[0], nullptr) == 3);
#elif defined(__aarch64__)
  if (f.neon) CHECK(rvq_detail::nearest_neon(q3, pd.stage[0], nullptr) == 3);
  // The dispatch: NEON unless WASTE_SIMD=scalar (the log of each run names the level).
  MESSAGE("book search path: " << std::string(simd_level_name(simd_level())));
  const bool neon = simd_level() == SimdLevel::Neon;  // (bools: doctest cannot print a function pointer)
  CHECK((rvq_detail::nearest_fn() == &rvq_detail::nearest_neon) == neon);
  CHECK((rvq_detail::scores_fn() == &rvq_detail::scores_neon) == neon);
#endif
}

TEST_CASE("encode/decode: Gaussian error in range, beam no worse than greedy, deterministic") {
  const int rows = 130, cols = 256;  // rows not a multiple of 64: a padded last tile
  std::vector<float> w = gaussian_weights(size_t(rows) * cols, 7);
  RvqOptions opt = quick();
  std::vector<float> books = train_codebooks(w.data(), size_t(rows), cols, opt);
  REQUIRE(books.size() == kCodebookFloats);
  std::vector<uint8_t> codes(vq3r_code_bytes(rows, cols)), codes2(codes.size());
  std::vector<uint16_t> scales(static_cast<size_t>(rows)), scales2(static_cast<size_t>(rows));
  EncodeStats g = encode_matrix(w.data(), rows, cols, books.data(), opt, codes.data(), scales.data());
  // Trained on the matrix itself (4k vectors for 768 entries): well under scalar 3-bit (~0.035).
  CHECK(g.relative_mse() > 0.001);
  CHECK(g.relative_mse() < 0.04);
  // The reported error is the decoded error.
  std::vector<float> dec(w.size());
  decode_matrix(codes.data(), scales.data(), rows, cols, books.data(), dec.data());
  double e = 0, s = 0;
  for (size_t i = 0; i < w.size(); ++i) { e += (w[i] - dec[i]) * double(w[i] - dec[i]); s += double(w[i]) * w[i]; }
  CHECK(e / s == doctest::Approx(g.relative_mse()).epsilon(1e-6));
  // Decode follows the format: byte (r, g, s) at vq3r_code_index.
  {
    const int r = 129, gg = 5;
    float v = 0;
    for (int st = 0; st < 3; ++st) v += books[(size_t(st) * 256 + codes[vq3r_code_index(r, gg, st, cols)]) * 8 + 2];
    CHECK(dec[size_t(r) * cols + gg * 8 + 2] == doctest::Approx(f16_to_f32(scales[r]) * v).epsilon(1e-6));
  }
  // Padding rows of the last tile are zero codes.
  CHECK(codes[vq3r_code_index(130, 0, 0, cols)] == 0);
  CHECK(codes[vq3r_code_index(191, 31, 2, cols)] == 0);
  EncodeStats g2 = encode_matrix(w.data(), rows, cols, books.data(), opt, codes2.data(), scales2.data());
  CHECK(codes == codes2);
  CHECK(scales == scales2);
  CHECK(g2.sum_sq_error == g.sum_sq_error);
  opt.effort = RvqEffort::Beam;
  opt.beam_width = 4;
  opt.refine_passes = 1;
  EncodeStats b = encode_matrix(w.data(), rows, cols, books.data(), opt, codes2.data(), scales2.data());
  CHECK(b.relative_mse() < g.relative_mse());
}

TEST_CASE("encoder: zero rows and bad shapes") {
  const int rows = 3, cols = 16;
  std::vector<float> w(size_t(rows) * cols, 0.0f);
  for (int c = 0; c < cols; ++c) w[size_t(cols) + c] = float(c) - 7.5f;  // row 1 non-zero
  std::vector<float> books = gaussian_weights(kCodebookFloats, 9);
  std::vector<uint8_t> codes(vq3r_code_bytes(rows, cols));
  std::vector<uint16_t> scales(static_cast<size_t>(rows));
  RvqOptions opt = quick();
  EncodeStats st = encode_matrix(w.data(), rows, cols, books.data(), opt, codes.data(), scales.data());
  CHECK(scales[0] == 0);
  CHECK(scales[2] == 0);
  CHECK(st.relative_mse() < 1.0);
  CHECK_THROWS_AS(encode_matrix(w.data(), rows, 12, books.data(), opt, codes.data(), scales.data()), Error);
  CHECK_THROWS_AS(train_codebooks(w.data(), size_t(rows), 10, opt), Error);
}
