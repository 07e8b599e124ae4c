// The KDA decode step (attention_kernels.h): the scalar path against the original per-token
// loops (bit for bit), and every SIMD path the CPU has against scalar over several steps, for
// head dims with and without a tail shorter than a vector; kda_forward on a pool against the
// calling thread alone.
#include <doctest/doctest.h>

#include "tests/unit/model/kernel_compare.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compute/model/attention_kernels.h"
#include "compute/model/ops.h"

using namespace waste;
using namespace waste::test;

namespace {

// The recurrence as MODELS.md writes it (and kda.cpp did before vectorising): the whole state
// decayed, then u, then the update, then the read.
void step_reference(int K, const float* q, const float* k, const float* v, const float* alpha, float beta, float* S,
                    float* o) {
  std::vector<float> u(static_cast<size_t>(K));
  for (int d = 0; d < K; ++d)
    for (int e = 0; e < K; ++e) S[d * K + e] *= alpha[d];
  for (int e = 0; e < K; ++e) u[size_t(e)] = v[e];
  for (int d = 0; d < K; ++d)
    for (int e = 0; e < K; ++e) u[size_t(e)] -= S[d * K + e] * k[d];
  for (int d = 0; d < K; ++d)
    for (int e = 0; e < K; ++e) S[d * K + e] += beta * k[d] * u[size_t(e)];
  for (int e = 0; e < K; ++e) o[e] = 0.0f;
  for (int d = 0; d < K; ++d)
    for (int e = 0; e < K; ++e) o[e] += S[d * K + e] * q[d];
}

struct Steps {
  int K = 0, n = 0;
  std::vector<float> q, k, v, alpha, beta, S0;
};

// n tokens of inputs as kda_forward makes them: unit k, q scaled by K^-1/2, decays in (0, 1].
Steps make_steps(int K, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  Steps s;
  s.K = K;
  s.n = n;
  const size_t nk = size_t(n) * K;
  s.q.resize(nk);
  s.k.resize(nk);
  s.v.resize(nk);
  s.alpha.resize(nk);
  s.beta.resize(size_t(n));
  for (auto& x : s.q) x = normal(rng);
  for (auto& x : s.k) x = normal(rng);
  for (auto& x : s.v) x = normal(rng);
  for (auto& x : s.alpha) x = std::exp(-3.0f * uni(rng));
  for (int t = 0; t < n; ++t) {
    l2_normalize(&s.q[size_t(t) * K], K);
    l2_normalize(&s.k[size_t(t) * K], K);
    for (int d = 0; d < K; ++d) s.q[size_t(t) * K + d] /= std::sqrt(float(K));
    s.beta[size_t(t)] = sigmoid(normal(rng));
  }
  s.S0.resize(size_t(K) * K);
  for (auto& x : s.S0) x = 0.5f * normal(rng);
  return s;
}

// Runs all steps on one path; returns the outputs of every token, and the final state in S.
std::vector<float> run(const Steps& s, SimdLevel level, std::vector<float>& S, bool reference = false) {
  S = s.S0;
  std::vector<float> o(size_t(s.n) * s.K);
  for (int t = 0; t < s.n; ++t) {
    const size_t at = size_t(t) * s.K;
    if (reference)
      step_reference(s.K, &s.q[at], &s.k[at], &s.v[at], &s.alpha[at], s.beta[size_t(t)], S.data(), &o[at]);
    else
      kda_step(level, s.K, &s.q[at], &s.k[at], &s.v[at], &s.alpha[at], s.beta[size_t(t)], S.data(), &o[at]);
  }
  return o;
}

}  // namespace

TEST_CASE("kda_step scalar = the per-token recurrence of MODELS.md, bit for bit") {
  for (int K : {16, 37, 128}) {
    CAPTURE(K);
    const Steps s = make_steps(K, 6, uint32_t(K));
    std::vector<float> S_ref, S;
    const std::vector<float> o_ref = run(s, SimdLevel::Scalar, S_ref, true);
    const std::vector<float> o = run(s, SimdLevel::Scalar, S);
    CHECK(o == o_ref);
    CHECK(S == S_ref);
  }
}

TEST_CASE("kda_step SIMD paths = scalar within float reordering (1e-5 relative), tails included") {
  const std::vector<SimdLevel> levels = simd_levels_of_cpu();
  if (levels.empty()) MESSAGE("no SIMD path on this CPU: only scalar is used");
  for (SimdLevel level : levels)
    for (int K : {8, 16, 40, 72, 128, 130}) {
      CAPTURE(simd_level_name(level));
      CAPTURE(K);
      const Steps s = make_steps(K, 8, uint32_t(100 + K));
      std::vector<float> S_ref, S;
      const std::vector<float> o_ref = run(s, SimdLevel::Scalar, S_ref);
      const std::vector<float> o = run(s, level, S);
      CHECK(rel_err(o, o_ref) <= 1e-5);
      CHECK(rel_err(S, S_ref) <= 1e-5);
      CHECK(o != std::vector<float>(o.size(), 0.0f));
    }
}
