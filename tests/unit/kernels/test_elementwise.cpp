// elementwise.h: exp, softplus, sigmoid and SiLU against the exact functions (double libm),
// and every path's arrays against the scalar definition bit for bit, tails and special
// values included.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "shared/kernels/activation.h"
#include "shared/kernels/elementwise.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/half.h"

using namespace waste;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Distance in units in the last place between a float and the exact value rounded to float.
double ulps(float got, double exact) {
  const float want = float(exact);
  if (got == want) return 0;
  const double ulp = std::nextafter(std::fabs(want), kInf) - std::fabs(want);
  return std::fabs(double(got) - exact) / ulp;
}

std::vector<float> probe_values(std::mt19937& rng, int n) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 20.0f, 20.0001f, -20.0f, 88.0f, 88.37f, 88.38f, 89.0f,
                          -87.0f, -87.33f, -87.34f, -100.0f, 1e-8f, -1e-8f, 1e-40f, kInf, -kInf, kNan, 0.3465f,
                          -0.3466f, 1e30f, -1e30f};
  std::uniform_real_distribution<float> wide(-100.0f, 100.0f), narrow(-8.0f, 8.0f);
  while (int(v.size()) < n) v.push_back(v.size() % 2 ? wide(rng) : narrow(rng));
  return v;
}

bool same_bits(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_to_bits(a) == f32_to_bits(b); }

}  // namespace

TEST_CASE("elementwise: exp_det within 2 ulp of e^x, 0 and inf beyond its range, NaN kept") {
  double worst = 0;
  for (float x = -87.3f; x < 88.3f; x += 0.0137f) {
    const double u = ulps(exp_det(x), std::exp(double(x)));
    worst = std::max(worst, u);
  }
  CHECK_LE(worst, 2.0);
  CHECK_EQ(exp_det(0.0f), 1.0f);
  CHECK_EQ(exp_det(-0.0f), 1.0f);
  CHECK_EQ(exp_det(-88.0f), 0.0f);
  CHECK_EQ(exp_det(-kInf), 0.0f);
  CHECK_EQ(exp_det(89.0f), kInf);
  CHECK_EQ(exp_det(kInf), kInf);
  CHECK(std::isnan(exp_det(kNan)));
}

TEST_CASE("elementwise: softplus_det, sigmoid and silu against the exact functions") {
  double worst = 0;
  for (float x = -87.0f; x <= 20.0f; x += 0.0113f) {  // e^x normal: below, softplus is 0
    const double exact = std::log1p(std::exp(double(x)));
    worst = std::max(worst, ulps(softplus_det(x), exact));
  }
  CHECK_LE(worst, 4.0);
  CHECK_EQ(softplus_det(25.5f), 25.5f);  // x itself above 20
  CHECK_EQ(softplus_det(-kInf), 0.0f);
  CHECK_EQ(softplus_det(-90.0f), 0.0f);
  CHECK(std::isnan(softplus_det(kNan)));
  double worst_sig = 0;
  for (float x = -30.0f; x <= 30.0f; x += 0.0071f) {
    worst_sig = std::max(worst_sig, ulps(sigmoid(x), 1.0 / (1.0 + std::exp(-double(x)))));
  }
  CHECK_LE(worst_sig, 4.0);
  CHECK_EQ(sigmoid(-200.0f), 0.0f);
  CHECK_EQ(sigmoid(200.0f), 1.0f);
  CHECK_EQ(silu(0.0f), 0.0f);
}

TEST_CASE("elementwise: every path's arrays give the scalar definition's bits") {
  std::mt19937 rng(5);
  std::vector<const ElementwiseKernels*> paths;  // every path this CPU has (matvec_paths.h's list)
  for (KernelPath p : available_kernel_paths()) {
    const ElementwiseKernels* k = elementwise_for(p);
    REQUIRE(k != nullptr);
    paths.push_back(k);
  }
  const int count = int(paths.size());
  REQUIRE_GE(count, 1);
  CHECK_EQ(std::string(paths[0]->name), "scalar");
  CHECK_EQ(&elementwise(), elementwise_for(best_kernel_path()));
  for (int n : {0, 1, 7, 15, 16, 17, 33, 1000}) {
    const std::vector<float> x = probe_values(rng, std::max(n, 1));
    std::vector<float> g = probe_values(rng, std::max(n, 1) + 7);
    g.erase(g.begin(), g.begin() + 7);  // the gates' special values beside other x's
    // The definition: the scalar functions one value at a time.
    const size_t len = static_cast<size_t>(n);
    std::vector<float> exp_ref(len), soft_ref(len), silu_ref(len), mul_ref(len), gated_ref(len);
    for (int i = 0; i < n; ++i) {
      exp_ref[size_t(i)] = exp_det(x[size_t(i)]);
      soft_ref[size_t(i)] = softplus_det(x[size_t(i)]);
      silu_ref[size_t(i)] = silu(x[size_t(i)]);
      mul_ref[size_t(i)] = x[size_t(i)] * sigmoid(g[size_t(i)]);
      gated_ref[size_t(i)] = gated_silu(g[size_t(i)], x[size_t(i)]);
    }
    for (int p = 0; p < count; ++p) {
      const ElementwiseKernels& k = *paths[p];
      CAPTURE(k.name);
      CAPTURE(n);
      std::vector<float> y(size_t(n), 7.0f);
      auto check = [&](const std::vector<float>& ref, const char* what) {
        CAPTURE(what);
        for (int i = 0; i < n; ++i) {
          CAPTURE(x[size_t(i)]);
          CHECK(same_bits(y[size_t(i)], ref[size_t(i)]));
        }
      };
      k.exp(x.data(), y.data(), n);
      check(exp_ref, "exp");
      k.softplus(x.data(), y.data(), n);
      check(soft_ref, "softplus");
      k.silu(x.data(), y.data(), n);
      check(silu_ref, "silu");
      y.assign(x.begin(), x.begin() + n);
      k.mul_sigmoid(y.data(), g.data(), n);
      check(mul_ref, "mul_sigmoid");
      k.gated_silu(g.data(), x.data(), y.data(), n);
      check(gated_ref, "gated_silu");
      // In place, as the model calls them.
      y.assign(x.begin(), x.begin() + n);
      k.softplus(y.data(), y.data(), n);
      check(soft_ref, "softplus in place");
    }
  }
}
