// waste-bench-rvq-error: relative weight error of VQ3R (greedy, beam) against 3-bit
// round-to-nearest with groups of 32 on synthetic 2048x4096 matrices (iid Gaussian, and
// heavy-tailed: Student-t 5 dof with log-normal row and column scales). A tool, not a test:
// a full run takes about a minute.
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/rvq/encoder.h"
#include "shared/util/cpu.h"
#include "shared/util/half.h"
#include "shared/util/thread_pool.h"

using namespace waste;

namespace {

double cpu_now() { return double(std::clock()) / CLOCKS_PER_SEC; }
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<float> gaussian(int rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> w(size_t(rows) * cols);
  for (auto& v : w) v = n(rng);
  return w;
}

std::vector<float> heavy_tailed(int rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> t(5);
  std::normal_distribution<float> n(0, 0.5f);
  std::vector<float> rs(static_cast<size_t>(rows)), cs(static_cast<size_t>(cols));
  for (auto& v : rs) v = std::exp(n(rng));
  for (auto& v : cs) v = std::exp(n(rng));
  std::vector<float> w(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) w[size_t(r) * cols + c] = t(rng) * rs[size_t(r)] * cs[size_t(c)];
  return w;
}

// Symmetric 3-bit RTN (levels -4..3) with one f16 scale per 32 weights (3.5 bpw); the scale of
// each group is the best of a small grid, a generous baseline.
double rtn3_g32(const std::vector<float>& w) {
  double err = 0, sq = 0;
  for (size_t g = 0; g < w.size(); g += 32) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(w[g + i]));
    double best = 1e300;
    for (int k = 0; k <= 20 && amax > 0; ++k) {
      float scale = f16_to_f32(f32_to_f16(amax / (2.5f + 0.1f * k)));
      double e = 0;
      for (int i = 0; i < 32; ++i) {
        float q = std::clamp(std::nearbyint(w[g + i] / scale), -4.0f, 3.0f);
        // Also try the mirrored grid (-3..4) via the sign of the largest value: taken care of by
        // trying both signs of the scale.
        double t = w[g + i] - q * scale;
        e += t * t;
      }
      double e2 = 0;
      for (int i = 0; i < 32; ++i) {
        float q = std::clamp(std::nearbyint(w[g + i] / -scale), -4.0f, 3.0f);
        double t = w[g + i] + q * scale;
        e2 += t * t;
      }
      best = std::min({best, e, e2});
    }
    if (amax == 0) best = 0;
    err += best;
    for (int i = 0; i < 32; ++i) sq += double(w[g + i]) * w[g + i];
  }
  return err / sq;
}

// Plain RTN: d = (signed value of largest magnitude) / -4, q = clamp(round(w/d), -4, 3).
double rtn3_g32_plain(const std::vector<float>& w) {
  double err = 0, sq = 0;
  for (size_t g = 0; g < w.size(); g += 32) {
    float m = 0;
    for (int i = 0; i < 32; ++i)
      if (std::fabs(w[g + i]) > std::fabs(m)) m = w[g + i];
    const float d = f16_to_f32(f32_to_f16(m / -4.0f));
    for (int i = 0; i < 32; ++i) {
      float q = d != 0 ? std::clamp(std::nearbyint(w[g + i] / d), -4.0f, 3.0f) : 0.0f;
      double t = w[g + i] - q * d;
      err += t * t;
      sq += double(w[g + i]) * w[g + i];
    }
  }
  return err / sq;
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 2048, cols = 4096;
  if (argc > 2) { rows = std::atoi(argv[1]); cols = std::atoi(argv[2]); }
  const unsigned threads = ThreadPool::global().size();
  std::printf("# %s, %u threads, %dx%d\n", cpu_summary().c_str(), threads, rows, cols);
  std::printf("%-13s %-34s %8s %6s %9s %12s\n", "matrix", "method", "rel_mse", "bpw", "enc_s", "Mw/cpu_s");
  for (int m = 0; m < 2; ++m) {
    const char* name = m == 0 ? "gaussian" : "heavy-tailed";
    std::vector<float> w = m == 0 ? gaussian(rows, cols, 1) : heavy_tailed(rows, cols, 2);
    const double weights = double(rows) * cols;
    std::vector<uint8_t> codes(vq3r_code_bytes(rows, cols));
    std::vector<uint16_t> scales(static_cast<size_t>(rows));
    struct Run { const char* label; RvqEffort effort; int beam, refine, train_refine; };
    const Run runs[] = {
        {"vq3r greedy", RvqEffort::Greedy, 1, 0, 2},
        {"vq3r beam8 + 2 refine", RvqEffort::Beam, 8, 2, 2},
    };
    for (const Run& run : runs) {
      RvqOptions opt;
      opt.effort = run.effort;
      opt.beam_width = run.beam;
      opt.refine_passes = run.refine;
      opt.train_refine_passes = run.train_refine;
      double t0 = now();
      std::vector<float> books = train_codebooks(w.data(), size_t(rows), cols, opt);
      double t1 = now(), c1 = cpu_now();
      EncodeStats st = encode_matrix(w.data(), rows, cols, books.data(), opt, codes.data(), scales.data());
      double t2 = now(), c2 = cpu_now();
      std::printf("%-13s %-34s %8.4f %6.3f %9.2f %12.2f   (train %.2f s)\n", name, run.label, st.relative_mse(),
                  3.0 + 16.0 / cols, t2 - t1, weights / (c2 - c1) / 1e6, t1 - t0);
      std::fflush(stdout);
    }
    double t0 = now();
    double e = rtn3_g32(w);
    std::printf("%-13s %-34s %8.4f %6.3f %9.2f\n", name, "rtn 3-bit g32, scale searched", e, 3.5, now() - t0);
    std::printf("%-13s %-34s %8.4f %6.3f\n", name, "rtn 3-bit g32, plain absmax", rtn3_g32_plain(w), 3.5);
  }
  return 0;
}
