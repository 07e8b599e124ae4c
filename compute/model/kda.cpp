#include "compute/model/kda.h"

#include <cmath>
#include <vector>

#include "compute/model/ops.h"

namespace waste {

KdaState make_kda_state(const ModelConfig& c) {
  const size_t P = size_t(c.kda_heads) * c.kda_head_dim;
  KdaState s;
  s.state.assign(size_t(c.kda_heads) * c.kda_head_dim * c.kda_head_dim, 0.0f);
  s.conv_q.assign(P * size_t(c.conv_kernel - 1), 0.0f);
  s.conv_k = s.conv_q;
  s.conv_v = s.conv_q;
  return s;
}

namespace {

// Causal depthwise conv over the window (previous kernel-1 inputs, then this one) and SiLU;
// then the window slides by one. Zero-initialised windows equal the zero padding of prefill.
void short_conv_silu(std::span<const float> weight, int kernel, std::vector<float>& window, float* x, int64_t P) {
  const int past = kernel - 1;
  for (int64_t ch = 0; ch < P; ++ch) {
    const float* wc = &weight[size_t(ch) * kernel];
    float* win = &window[size_t(ch) * past];
    float acc = wc[past] * x[ch];
    for (int j = 0; j < past; ++j) acc += wc[j] * win[j];
    for (int j = 0; j + 1 < past; ++j) win[j] = win[j + 1];
    if (past > 0) win[past - 1] = x[ch];
    x[ch] = silu(acc);
  }
}

}  // namespace

float kda_log_decay(const ModelConfig& c, float A, float z) {
  return c.kda_lower_bound ? c.kda_gate_lower_bound * sigmoid(A * z) : -A * softplus(z);
}

void kda_head_recurrent(int K, int64_t n, const KdaHeadInputs& in, float* S, float* o) {
  std::vector<float> decay(static_cast<size_t>(K)), u(static_cast<size_t>(K));
  for (int64_t t = 0; t < n; ++t) {
    const float* qh = in.q + t * in.stride;
    const float* kh = in.k + t * in.stride;
    const float* vh = in.v + t * in.stride;
    const float* ah = in.log_decay + t * in.stride;
    const float beta = in.beta[t * in.beta_stride];
    for (int d = 0; d < K; ++d) decay[size_t(d)] = std::exp(ah[d]);

    // S <- Diag(alpha) S ; u = v - S^T k ; S <- S + beta k u^T ; o = S^T q.
    for (int d = 0; d < K; ++d)
      for (int e = 0; e < K; ++e) S[d * K + e] *= decay[size_t(d)];
    for (int e = 0; e < K; ++e) u[size_t(e)] = vh[e];
    for (int d = 0; d < K; ++d)
      for (int e = 0; e < K; ++e) u[size_t(e)] -= S[d * K + e] * kh[d];
    for (int d = 0; d < K; ++d) {
      const float bk = beta * kh[d];
      for (int e = 0; e < K; ++e) S[d * K + e] += bk * u[size_t(e)];
    }
    float* oh = o + t * in.stride;
    for (int e = 0; e < K; ++e) oh[e] = 0.0f;
    for (int d = 0; d < K; ++d)
      for (int e = 0; e < K; ++e) oh[e] += S[d * K + e] * qh[d];
  }
}

void kda_forward(const ModelConfig& c, const KdaWeights& w, KdaState& s, const float* x, int64_t n, float* y,
                 int chunk) {
  const int H = c.kda_heads, K = c.kda_head_dim;
  const int64_t P = int64_t(H) * K;
  const int rank_f = int(w.f_a.rows);

  std::vector<float> q(size_t(n * P)), k(size_t(n * P)), v(size_t(n * P)), f(size_t(n * P)), g(size_t(n * P));
  std::vector<float> b(size_t(n) * H);
  matmul(w.q_proj, x, n, q.data());
  matmul(w.k_proj, x, n, k.data());
  matmul(w.v_proj, x, n, v.data());
  {
    std::vector<float> low(size_t(n) * rank_f);
    matmul(w.f_a, x, n, low.data());
    matmul(w.f_b, low.data(), n, f.data());
  }
  if (w.g_proj.rows > 0) {
    matmul(w.g_proj, x, n, g.data());
  } else {
    std::vector<float> low(size_t(n) * w.g_a.rows);
    matmul(w.g_a, x, n, low.data());
    matmul(w.g_b, low.data(), n, g.data());
  }
  matmul(w.b_proj, x, n, b.data());

  // Per token: conv (sequential through the windows), normalised q and k, log decay (into f)
  // and beta (into b). Everything the delta rule needs is then ready for all n tokens.
  const float q_scale = 1.0f / std::sqrt(float(K));
  for (int64_t t = 0; t < n; ++t) {
    float* qt = &q[size_t(t * P)];
    float* kt = &k[size_t(t * P)];
    short_conv_silu(w.q_conv, c.conv_kernel, s.conv_q, qt, P);
    short_conv_silu(w.k_conv, c.conv_kernel, s.conv_k, kt, P);
    short_conv_silu(w.v_conv, c.conv_kernel, s.conv_v, &v[size_t(t * P)], P);
    for (int h = 0; h < H; ++h) {
      float* qh = qt + h * K;
      float* kh = kt + h * K;
      l2_normalize(qh, K);
      l2_normalize(kh, K);
      for (int d = 0; d < K; ++d) qh[d] *= q_scale;
      const float A = std::exp(w.A_log[size_t(h)]);
      float* fh = &f[size_t(t * P + h * K)];
      for (int d = 0; d < K; ++d) fh[d] = kda_log_decay(c, A, fh[d] + w.dt_bias[size_t(h * K + d)]);
      b[size_t(t) * H + h] = sigmoid(b[size_t(t) * H + h]);
    }
  }

  std::vector<float> o(size_t(n * P));
  for (int h = 0; h < H; ++h) {
    KdaHeadInputs in;
    in.q = &q[size_t(h * K)];
    in.k = &k[size_t(h * K)];
    in.v = &v[size_t(h * K)];
    in.log_decay = &f[size_t(h * K)];
    in.stride = P;
    in.beta = &b[size_t(h)];
    in.beta_stride = H;
    float* S = &s.state[size_t(h) * K * K];
    if (n > 1 && chunk > 1)
      kda_head_chunked(K, n, in, chunk, S, &o[size_t(h * K)]);
    else
      kda_head_recurrent(K, n, in, S, &o[size_t(h * K)]);
  }

  // Gated RMSNorm per token and head: norm(o) * o_norm * sigmoid(g).
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) {
      float* oh = &o[size_t(t * P + h * K)];
      const float* gh = &g[size_t(t * P + h * K)];
      rmsnorm(oh, w.o_norm.data(), K, c.rms_eps, oh);
      for (int e = 0; e < K; ++e) oh[e] *= sigmoid(gh[e]);
    }
  matmul(w.o_proj, o.data(), n, y);
}

}  // namespace waste
