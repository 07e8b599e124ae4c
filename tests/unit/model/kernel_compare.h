// What the kernel tests of compute/model share: the SIMD paths this CPU can run, random
// inputs, and the error of a path against the scalar reference.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "shared/util/cpu.h"

namespace waste::test {

// The SIMD levels this CPU runs, whatever WASTE_SIMD says: a level is runnable when capping
// the CPU at it (cpu.h's simd_level_for, the one definition of which features a level needs)
// gives that level. Empty on a CPU with no SIMD level: only scalar is tested there.
inline std::vector<SimdLevel> simd_levels_of_cpu() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Neon})
    if (simd_level_for(cpu_features(), simd_level_name(level)).level == level) levels.push_back(level);
  return levels;
}

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
