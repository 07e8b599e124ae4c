// What the kernel tests of compute/model share: the SIMD paths this CPU can run
// (tests/support/simd_levels.h), random inputs, and the error of a path against the scalar
// reference.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "shared/util/cpu.h"
#include "tests/support/simd_levels.h"  // simd_levels_of_cpu

namespace waste::test {

inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

// max |a - b| / max |b|: the error relative to the size of the reference.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0, ref = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(std::isfinite(a[i]));
    m = std::max(m, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(b[i])));
  }
  return m / ref;
}

}  // namespace waste::test
