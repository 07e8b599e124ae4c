// The chunked KDA delta rule (kda_chunked.cpp) against the token-by-token recurrence on random
// inputs: outputs and final state, several head dims, chunk sizes and prompt lengths that are not
// multiples of the chunk, both gates (Kimi-Linear softplus, K3 lower-bounded), with decays from
// mild to steep enough that the factorised products must leave channels out.
#include <doctest/doctest.h>

#include "tests/unit/model/kernel_compare.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compute/model/kda.h"
#include "tests/support/layer_forward.h"
#include "compute/model/ops.h"
#include "shared/util/thread_pool.h"

using namespace waste;
using namespace waste::test;

namespace {

float max_abs(const std::vector<float>& x) {
  float m = 0;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

enum class Gate { KimiMild, KimiSteep, K3 };

struct HeadCase {
  int K = 0;
  int64_t n = 0;
  std::vector<float> q, k, v, a, beta, S0;
};

// Inputs as kda_forward hands them over: unit k, unit q scaled by K^-1/2, log decays from the
// model's gate formula, beta = sigmoid, and a random start state (as after an earlier chunk).
HeadCase make_case(int K, int64_t n, Gate gate, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  HeadCase h;
  h.K = K;
  h.n = n;
  const size_t nk = size_t(n) * K;
  h.q.resize(nk);
  h.k.resize(nk);
  h.v.resize(nk);
  h.a.resize(nk);
  h.beta.resize(size_t(n));
  for (auto& x : h.q) x = normal(rng);
  for (auto& x : h.k) x = normal(rng);
  for (auto& x : h.v) x = normal(rng);
  for (int64_t t = 0; t < n; ++t) {
    l2_normalize(&h.q[size_t(t) * K], K);
    l2_normalize(&h.k[size_t(t) * K], K);
    for (int d = 0; d < K; ++d) h.q[size_t(t) * K + d] /= std::sqrt(float(K));
    h.beta[size_t(t)] = sigmoid(normal(rng));
  }
  ModelConfig c;
  c.kda_lower_bound = gate == Gate::K3;
  c.kda_gate_lower_bound = -5.0f;
  // Kimi-Linear: A_log in [0, log 16]. Steep: dt_bias spread so some channels lose up to ~50
  // per token (their range in a chunk exceeds what the products factorise) and others almost
  // nothing. K3: bounded by -5 per token whatever the inputs.
  const float A = std::exp(uni(rng) * std::log(16.0f));
  std::vector<float> dt(static_cast<size_t>(K));
  for (auto& x : dt) x = gate == Gate::KimiSteep ? -6.0f + 9.0f * uni(rng) : -4.0f + 2.0f * uni(rng);
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < K; ++d) {
      const float z = (gate == Gate::K3 ? 2.0f : 1.0f) * normal(rng) + dt[size_t(d)];
      h.a[size_t(t) * K + d] = kda_log_decay(c, A, z);
    }
  h.S0.resize(size_t(K) * K);
  for (auto& x : h.S0) x = 0.5f * normal(rng);
  return h;
}

KdaHeadInputs inputs_of(const HeadCase& h) {
  KdaHeadInputs in;
  in.q = h.q.data();
  in.k = h.k.data();
  in.v = h.v.data();
  in.log_decay = h.a.data();
  in.stride = h.K;
  in.beta = h.beta.data();
  in.beta_stride = 1;
  return in;
}

}  // namespace

TEST_CASE("chunked KDA head = recurrence: outputs and final state within 1e-5 relative") {
  double worst_o = 0, worst_s = 0;
  int cases = 0;
  for (int K : {8, 37, 128})
    for (Gate gate : {Gate::KimiMild, Gate::KimiSteep, Gate::K3})
      for (int64_t n : {int64_t(45), int64_t(100)}) {
        const HeadCase h = make_case(K, n, gate, uint32_t(K * 1000 + int(gate) * 100 + n));
        if (gate == Gate::K3) {
          const float lowest = *std::min_element(h.a.begin(), h.a.end());
          REQUIRE(lowest >= -5.0f);
        }
        const KdaHeadInputs in = inputs_of(h);
        std::vector<float> S_ref = h.S0, o_ref(size_t(n) * K);
        kda_head_recurrent(K, n, in, S_ref.data(), o_ref.data());
        for (int chunk : {1, 7, 16, 32}) {
          CAPTURE(K);
          CAPTURE(int(gate));
          CAPTURE(n);
          CAPTURE(chunk);
          std::vector<float> S = h.S0, o(size_t(n) * K, -1.0f);
          kda_head_chunked(K, n, in, chunk, S.data(), o.data());
          const double eo = rel_err(o, o_ref), es = rel_err(S, S_ref);
          CHECK(eo <= 1e-5);
          CHECK(es <= 1e-5);
          worst_o = std::max(worst_o, eo);
          worst_s = std::max(worst_s, es);
          ++cases;
        }
      }
  MESSAGE("chunked vs recurrent over ", cases, " cases: max relative error outputs ", worst_o, ", state ", worst_s);
}

TEST_CASE("chunked KDA head: huge and infinite log decays give the recurrence's zeros, not NaN") {
  HeadCase h = make_case(16, 20, Gate::KimiMild, 7);
  for (int d = 0; d < 16; ++d) {
    h.a[size_t(5) * 16 + d] = -1e30f;  // wipes the state at token 5
    h.a[size_t(11) * 16 + d] = d % 2 ? -INFINITY : -3000.0f;
  }
  const KdaHeadInputs in = inputs_of(h);
  std::vector<float> S_ref = h.S0, o_ref(size_t(20) * 16);
  kda_head_recurrent(16, 20, in, S_ref.data(), o_ref.data());
  std::vector<float> S = h.S0, o(o_ref.size());
  kda_head_chunked(16, 20, in, 16, S.data(), o.data());
  CHECK(rel_err(o, o_ref) <= 1e-5);
  CHECK(rel_err(S, S_ref) <= 1e-5);
}

namespace {

struct Layer {
  std::vector<std::vector<float>> store;
  KdaWeights w;
  MatrixView mat(int64_t rows, int64_t cols, std::mt19937& rng, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    store.emplace_back(size_t(rows * cols));
    for (auto& x : store.back()) x = normal(rng);
    MatrixView m;
    m.rows = rows;
    m.cols = cols;
    m.data = store.back().data();
    return m;
  }
  std::span<const float> vec(size_t n, std::mt19937& rng, float mean, float scale) {
    std::normal_distribution<float> normal(mean, scale);
    store.emplace_back(n);
    for (auto& x : store.back()) x = normal(rng);
    return store.back();
  }
};

// Random weights of one KDA layer of `heads` x `head_dim` on a hidden size of D (low-rank
// gates of rank 8, short convolutions of 4 taps).
void random_kda_layer(Layer& l, int64_t D, int heads, int head_dim, std::mt19937& rng) {
  const int64_t P = int64_t(heads) * head_dim;
  l.store.reserve(32);  // (inner buffers keep their address when the outer vector grows)
  const float s = 1.0f / std::sqrt(float(D));
  l.w.q_proj = l.mat(P, D, rng, s);
  l.w.k_proj = l.mat(P, D, rng, s);
  l.w.v_proj = l.mat(P, D, rng, s);
  l.w.q_conv = l.vec(size_t(P) * 4, rng, 0.0f, 0.5f);
  l.w.k_conv = l.vec(size_t(P) * 4, rng, 0.0f, 0.5f);
  l.w.v_conv = l.vec(size_t(P) * 4, rng, 0.0f, 0.5f);
  l.w.f_a = l.mat(8, D, rng, s);
  l.w.f_b = l.mat(P, 8, rng, 0.5f);
  l.w.A_log = l.vec(size_t(heads), rng, 1.0f, 0.5f);
  l.w.dt_bias = l.vec(size_t(P), rng, -1.0f, 1.0f);
  l.w.b_proj = l.mat(heads, D, rng, s);
  l.w.g_a = l.mat(8, D, rng, s);
  l.w.g_b = l.mat(P, 8, rng, 0.5f);
  l.w.o_norm = l.vec(size_t(head_dim), rng, 1.0f, 0.1f);
  l.w.o_proj = l.mat(D, P, rng, 1.0f / std::sqrt(float(P)));
}

}  // namespace

TEST_CASE("kda_forward: chunked prefill = token-by-token, across calls (conv windows, gates, norm)") {
  for (bool k3 : {false, true}) {
    ModelConfig c;
    c.hidden = 24;
    c.kda_heads = 3;
    c.kda_head_dim = 16;
    c.conv_kernel = 4;
    c.rms_eps = 1e-5f;
    c.kda_lower_bound = k3;
    const int64_t D = c.hidden;
    std::mt19937 rng(k3 ? 11 : 12);
    Layer l;
    random_kda_layer(l, D, 3, 16, rng);

    const int64_t n1 = 37, n2 = 9;
    std::vector<float> x(size_t((n1 + n2) * D));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = normal(rng);

    KdaState ref = make_kda_state(c);
    std::vector<float> y_ref(x.size());
    kda_forward(c, l.w, ref, x.data(), n1, y_ref.data(), 1);
    kda_forward(c, l.w, ref, x.data() + n1 * D, n2, y_ref.data() + n1 * D, 1);
    for (int chunk : {7, 16}) {
      CAPTURE(k3);
      CAPTURE(chunk);
      KdaState st = make_kda_state(c);
      std::vector<float> y(x.size());
      kda_forward(c, l.w, st, x.data(), n1, y.data(), chunk);
      kda_forward(c, l.w, st, x.data() + n1 * D, n2, y.data() + n1 * D, chunk);
      CHECK(rel_err(y, y_ref) <= 1e-5);
      CHECK(rel_err(st.state, ref.state) <= 1e-5);
      CHECK(st.conv_k == ref.conv_k);
    }
  }
}

TEST_CASE("kda_forward: heads on a pool = the calling thread alone, prefill and decode, bit for bit") {
  ModelConfig c;
  c.hidden = 32;
  c.kda_heads = 4;
  c.kda_head_dim = 128;  // 4 x 128 x 128: enough state work per token to go to the pool
  c.conv_kernel = 4;
  c.rms_eps = 1e-5f;
  const int64_t D = c.hidden;
  std::mt19937 rng(21);
  Layer l;
  random_kda_layer(l, D, 4, 128, rng);

  const int64_t prompt = 21, decode = 3;
  std::vector<float> x(size_t((prompt + decode) * D));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  ThreadPool pool(2);
  KdaState alone = make_kda_state(c), pooled = make_kda_state(c);
  std::vector<float> y_alone(x.size()), y_pooled(x.size());
  kda_forward(c, l.w, alone, x.data(), prompt, y_alone.data(), kKdaPrefillChunk, nullptr);
  kda_forward(c, l.w, pooled, x.data(), prompt, y_pooled.data(), kKdaPrefillChunk, &pool);
  for (int64_t t = prompt; t < prompt + decode; ++t) {
    kda_forward(c, l.w, alone, &x[size_t(t * D)], 1, &y_alone[size_t(t * D)], kKdaPrefillChunk, nullptr);
    kda_forward(c, l.w, pooled, &x[size_t(t * D)], 1, &y_pooled[size_t(t * D)], kKdaPrefillChunk, &pool);
  }
  CHECK(y_pooled == y_alone);
  CHECK(pooled.state == alone.state);
  CHECK(pooled.conv_v == alone.conv_v);
  CHECK(max_abs(y_alone) > 0.0f);
}
