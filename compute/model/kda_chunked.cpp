// The chunked form of the KDA delta rule (MODELS.md 4.4; the same algebra as fla's chunk_kda),
// for prefill. It gives the recurrence's result (kda_head_recurrent) but touches the state once
// per chunk and does its work as small dense matrix products.
//
// Within a chunk of C tokens starting from state S0, let g_t = sum_{s<=t} a_s be the cumulative
// log decay per key channel from the chunk start (g_t <= 0, non-increasing), and let
// u_t = beta_t (v_t - (Diag(e^{g_t - g_{t-1}}) S_{t-1})^T k_t) be the vector the delta rule writes,
// so S_t = Diag(e^{a_t}) S_{t-1} + k_t u_t^T. Unrolled:
//   S_t = Diag(e^{g_t}) S0 + sum_{j<=t} Diag(e^{g_t - g_j}) k_j u_j^T.
// Hence (I + Diag(beta) A) U = Diag(beta) (V - Kg S0), with Kg_t = k_t * e^{g_t} and the strictly
// lower A[t][j] = sum_d k_t[d] k_j[d] e^{g_t[d] - g_j[d]}: a unit lower triangular system, solved
// by forward substitution (the UT transform). Then
//   o_t = S0^T (q_t * e^{g_t}) + sum_{j<=t} M[t][j] u_j,  M[t][j] = sum_d q_t[d] k_j[d] e^{g_t[d] - g_j[d]},
//   S_C = Diag(e^{g_C}) S0 + sum_j (k_j * e^{g_C - g_j}) u_j^T.
//
// Decay products are never formed as running products or as e^{-g}: every factor is e^{x} of a
// difference of cumulative log decays (kept in double, so large Kimi-Linear decays do not cancel).
// A and M are matrix products after the split e^{g_t - g_j} = e^{g_t - r} e^{r - g_j} with r the
// middle of the channel's range in this chunk, so both exponents stay within +-kMaxSpan/2 (no
// overflow, no denormals). A channel whose range is wider (steep decay: Kimi-Linear's gate is
// unbounded; K3's is at most 5 per token) is left out of the products and added pair by pair
// with e^{g_t - g_j} <= 1. Factors that underflow to 0 are correct: the recurrence also
// multiplies such contributions away.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compute/model/kda.h"

namespace waste {

namespace {

// Largest range of cumulative log decay within a chunk that a channel may have to go through
// the factorised products: exponents stay within +-32 (e^32 = 7.9e13), and the argument of each
// float exp is then rounded by at most 32 * 2^-24 = 1.9e-6 relative to the factor.
constexpr double kMaxSpan = 64.0;
// Log decays below this are clamped: e^-1000 is 0 in float as is e^a in the recurrence, and
// the clamp keeps -inf out of the differences.
constexpr double kMinLogDecay = -1000.0;

// Cc[i][j] += sum_p Aa[i][p] Bb[p][j] for i < m, j < n, p < kk (row-major with leading
// dimensions). 4 x 8 register blocks so each B row loaded is used for four output rows.
using v4 = float __attribute__((vector_size(16)));

void gemm_acc(int m, int n, int kk, const float* Aa, int lda, const float* Bb, int ldb, float* Cc, int64_t ldc) {
  constexpr int R = 4, L = 8;
  int i = 0;
  for (; i + R <= m; i += R) {
    int j = 0;
    for (; j + L <= n; j += L) {
      // Eight accumulators of four lanes (GCC/Clang vector extension: plain SSE on the
      // baseline target, no run-time dispatch needed), so they stay in registers across p.
      v4 acc[R][2];
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < 2; ++h) std::memcpy(&acc[r][h], Cc + (i + r) * ldc + j + 4 * h, sizeof(v4));
      for (int p = 0; p < kk; ++p) {
        v4 b0, b1;
        std::memcpy(&b0, Bb + p * ldb + j, sizeof(v4));
        std::memcpy(&b1, Bb + p * ldb + j + 4, sizeof(v4));
        for (int r = 0; r < R; ++r) {
          const float a = Aa[(i + r) * lda + p];
          acc[r][0] += a * b0;
          acc[r][1] += a * b1;
        }
      }
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < 2; ++h) std::memcpy(Cc + (i + r) * ldc + j + 4 * h, &acc[r][h], sizeof(v4));
    }
    for (; j < n; ++j)
      for (int r = 0; r < R; ++r) {
        float acc = Cc[(i + r) * ldc + j];
        for (int p = 0; p < kk; ++p) acc += Aa[(i + r) * lda + p] * Bb[p * ldb + j];
        Cc[(i + r) * ldc + j] = acc;
      }
  }
  for (; i < m; ++i)
    for (int p = 0; p < kk; ++p) {
      const float a = Aa[i * lda + p];
      float* c = Cc + i * ldc;
      const float* b = Bb + p * ldb;
      for (int j = 0; j < n; ++j) c[j] += a * b[j];
    }
}

float exp_of(double x) { return std::exp(float(x)); }

}  // namespace

void kda_head_chunked(int K, int64_t n, const KdaHeadInputs& in, int chunk, float* S, float* o) {
  const int C = std::max(chunk, 1);
  const size_t CK = size_t(C) * K;
  std::vector<double> g(CK);                      // [C][K] cumulative log decay from the chunk start
  std::vector<double> mid(static_cast<size_t>(K));             // per channel reference point r
  std::vector<float> last_mid(static_cast<size_t>(K));         // e^{g_C - r}
  std::vector<float> kq(2 * CK), wo(2 * CK);      // [Kg ; Qg] and their products with S0
  std::vector<float> dq(2 * CK);                  // [k * e^{g-r} ; q * e^{g-r}] (0 on steep channels)
  std::vector<float> kiT(CK), kcT(CK);            // [K][C]: k_j e^{r-g_j} ; k_j e^{g_C-g_j}
  std::vector<float> am(2 * size_t(C) * C);       // [A ; M], rows of C
  std::vector<float> U(CK);                       // [C][K]: right-hand side, then u
  std::vector<float> beta(static_cast<size_t>(C));
  std::vector<int> steep;
  steep.reserve(size_t(K));

  for (int64_t c0 = 0; c0 < n; c0 += C) {
    const int nc = int(std::min<int64_t>(C, n - c0));
    auto q = [&](int t) { return in.q + (c0 + t) * in.stride; };
    auto k = [&](int t) { return in.k + (c0 + t) * in.stride; };
    auto v = [&](int t) { return in.v + (c0 + t) * in.stride; };
    float* oc = o + c0 * in.stride;

    for (int t = 0; t < nc; ++t) {
      const float* a = in.log_decay + (c0 + t) * in.stride;
      const double* prev = t > 0 ? &g[size_t(t - 1) * K] : nullptr;
      double* gt = &g[size_t(t) * K];
      for (int d = 0; d < K; ++d) gt[d] = (prev ? prev[d] : 0.0) + std::max(double(a[d]), kMinLogDecay);
      beta[size_t(t)] = in.beta[(c0 + t) * in.beta_stride];
    }
    const double* glast = &g[size_t(nc - 1) * K];
    steep.clear();
    for (int d = 0; d < K; ++d) {
      mid[size_t(d)] = 0.5 * (g[size_t(d)] + glast[d]);
      last_mid[size_t(d)] = exp_of(glast[d] - mid[size_t(d)]);
      if (g[size_t(d)] - glast[d] > kMaxSpan) steep.push_back(d);
    }
    std::vector<char> is_steep(static_cast<size_t>(K), 0);
    for (int d : steep) is_steep[size_t(d)] = 1;

    // The per-token factors of every product below.
    for (int t = 0; t < nc; ++t) {
      const double* gt = &g[size_t(t) * K];
      const float *qt = q(t), *kt = k(t);
      float* kg = &kq[size_t(t) * K];
      float* qg = &kq[size_t(nc + t) * K];
      float* kd = &dq[size_t(t) * K];
      float* qd = &dq[size_t(nc + t) * K];
      for (int d = 0; d < K; ++d) {
        const float e = exp_of(gt[d]);
        kg[d] = kt[d] * e;
        qg[d] = qt[d] * e;
        if (is_steep[size_t(d)]) {
          kd[d] = qd[d] = kiT[size_t(d) * C + t] = 0.0f;
          kcT[size_t(d) * C + t] = kt[d] * exp_of(glast[d] - gt[d]);
        } else {
          // One exp per factorised channel and token: e^{r-g} = 1/e^{g-r} and
          // e^{g_C-g} = e^{g_C-r} e^{r-g}, all within e^{+-32} (no overflow, no denormal).
          const float E = exp_of(gt[d] - mid[size_t(d)]), inv = 1.0f / E;
          kd[d] = kt[d] * E;
          qd[d] = qt[d] * E;
          kiT[size_t(d) * C + t] = kt[d] * inv;
          kcT[size_t(d) * C + t] = kt[d] * (last_mid[size_t(d)] * inv);
        }
      }
    }

    // [W ; O0] = [Kg ; Qg] S0: the state's part of the delta-rule read and of the output.
    std::fill(wo.begin(), wo.begin() + 2 * ptrdiff_t(nc) * K, 0.0f);
    gemm_acc(2 * nc, K, K, kq.data(), K, S, K, wo.data(), K);
    for (int t = 0; t < nc; ++t) {
      const float* vt = v(t);
      const float* wt = &wo[size_t(t) * K];
      float* ut = &U[size_t(t) * K];
      for (int e = 0; e < K; ++e) ut[e] = beta[size_t(t)] * (vt[e] - wt[e]);
      std::copy_n(&wo[size_t(nc + t) * K], K, oc + t * in.stride);
    }

    // [A ; M] over the factorised channels, then the steep channels pair by pair.
    std::fill(am.begin(), am.begin() + 2 * ptrdiff_t(nc) * C, 0.0f);
    gemm_acc(2 * nc, nc, K, dq.data(), K, kiT.data(), C, am.data(), C);
    float* Am = am.data();
    float* Mm = am.data() + size_t(nc) * C;
    for (int d : steep)
      for (int j = 0; j < nc; ++j) {
        const float kj = k(j)[d];
        for (int t = j; t < nc; ++t) {
          const float kf = kj * exp_of(g[size_t(t) * K + d] - g[size_t(j) * K + d]);
          if (t > j) Am[t * C + j] += k(t)[d] * kf;
          Mm[t * C + j] += q(t)[d] * kf;
        }
      }

    // Forward substitution: u_t = rhs_t - beta_t sum_{j<t} A[t][j] u_j.
    for (int t = 1; t < nc; ++t) {
      float* ut = &U[size_t(t) * K];
      for (int j = 0; j < t; ++j) {
        const float a = beta[size_t(t)] * Am[t * C + j];
        const float* uj = &U[size_t(j) * K];
        for (int e = 0; e < K; ++e) ut[e] -= a * uj[e];
      }
    }

    // o += M U over j <= t (the upper part of M holds unused products: zero it).
    for (int t = 0; t < nc; ++t)
      for (int j = t + 1; j < nc; ++j) Mm[t * C + j] = 0.0f;
    gemm_acc(nc, K, nc, Mm, C, U.data(), K, oc, in.stride);

    // S <- Diag(e^{g_C}) S0 + sum_j (k_j e^{g_C - g_j}) u_j^T.
    for (int d = 0; d < K; ++d) {
      const float e = exp_of(glast[d]);
      for (int x = 0; x < K; ++x) S[size_t(d) * K + x] *= e;
    }
    gemm_acc(K, K, nc, kcT.data(), C, U.data(), K, S, K);
  }
}

}  // namespace waste
