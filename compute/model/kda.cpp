#include "compute/model/kda.h"

#include <cmath>
#include <vector>

#include "compute/model/attention_kernels.h"
#include "compute/model/ops.h"
#include "shared/kernels/elementwise.h"
#include "shared/util/thread_pool.h"

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

// Causal depthwise conv over the window (previous kernel-1 inputs, then this one) and SiLU,
// for channels [ch0, ch1); then the window slides by one. Zero-initialised windows equal the
// zero padding of prefill. The SiLU runs over the channels at once (elementwise.h).
void short_conv_silu(std::span<const float> weight, int kernel, std::vector<float>& window, float* x, int64_t ch0,
                     int64_t ch1) {
  const int past = kernel - 1;
  for (int64_t ch = ch0; ch < ch1; ++ch) {
    const float* wc = &weight[size_t(ch) * kernel];
    float* win = &window[size_t(ch) * past];
    float acc = wc[past] * x[ch];
    for (int j = 0; j < past; ++j) acc += wc[j] * win[j];
    for (int j = 0; j + 1 < past; ++j) win[j] = win[j + 1];
    if (past > 0) win[past - 1] = x[ch];
    x[ch] = acc;
  }
  elementwise().silu(x + ch0, x + ch0, ch1 - ch0);
}

// Below this much state work (heads x K x K x tokens) a hand-off to the pool costs more than
// the heads take on one thread (tiny test models).
constexpr int64_t kParallelMinWork = int64_t(1) << 16;

// Runs body(h) for every head, on the global pool when there is enough work. Heads are
// independent (own channels, state and output), so the split never changes a result.
template <class F>
void for_each_head(ThreadPool* pool, int H, int64_t work, F&& body) {
  if (!pool || pool->size() < 2 || H < 2 || work < kParallelMinWork) {
    for (int h = 0; h < H; ++h) body(h);
    return;
  }
  pool->parallel_for(size_t(H), 1, [&](size_t b, size_t e) {
    for (size_t h = b; h < e; ++h) body(int(h));
  });
}

}  // namespace

float kda_log_decay(const ModelConfig& c, float A, float z) {
  return c.kda_lower_bound ? c.kda_gate_lower_bound * sigmoid(A * z) : -A * softplus_det(z);
}

void kda_head_recurrent(int K, int64_t n, const KdaHeadInputs& in, float* S, float* o) {
  const SimdLevel level = simd_level();
  std::vector<float> alpha(static_cast<size_t>(K));
  for (int64_t t = 0; t < n; ++t) {
    const float* ah = in.log_decay + t * in.stride;
    elementwise().exp(ah, alpha.data(), K);
    kda_step(level, K, in.q + t * in.stride, in.k + t * in.stride, in.v + t * in.stride, alpha.data(),
             in.beta[t * in.beta_stride], S, o + t * in.stride);
  }
}

void kda_project(const ModelConfig& c, const KdaWeights& w, const float* x, int64_t n, KdaProjections& p) {
  const int64_t P = int64_t(c.kda_heads) * c.kda_head_dim;
  for (auto* m : {&p.q, &p.k, &p.v, &p.f, &p.g}) m->resize(size_t(n * P));
  p.b.resize(size_t(n) * c.kda_heads);
  matmul(w.q_proj, x, n, p.q.data());
  matmul(w.k_proj, x, n, p.k.data());
  matmul(w.v_proj, x, n, p.v.data());
  {
    std::vector<float> low(size_t(n * w.f_a.rows));
    matmul(w.f_a, x, n, low.data());
    matmul(w.f_b, low.data(), n, p.f.data());
  }
  if (w.g_proj.rows > 0) {
    matmul(w.g_proj, x, n, p.g.data());
  } else {
    std::vector<float> low(size_t(n * w.g_a.rows));
    matmul(w.g_a, x, n, low.data());
    matmul(w.g_b, low.data(), n, p.g.data());
  }
  matmul(w.b_proj, x, n, p.b.data());
}

void kda_mix(const ModelConfig& c, const KdaWeights& w, KdaState& s, KdaProjections& p, int64_t row0, int64_t n,
             float* o, int chunk, ThreadPool* pool) {
  const int H = c.kda_heads, K = c.kda_head_dim;
  const int64_t P = int64_t(H) * K;
  // This session's rows: token t of it at row t of every view below.
  float* q = &p.q[size_t(row0 * P)];
  float* k = &p.k[size_t(row0 * P)];
  float* v = &p.v[size_t(row0 * P)];
  float* f = &p.f[size_t(row0 * P)];
  const float* g = &p.g[size_t(row0 * P)];
  float* b = &p.b[size_t(row0) * H];
  o += row0 * P;

  // Everything after the projections is per head: the conv, norms and gates of its channels
  // (sequential through the tokens, for the conv windows), the delta rule on its state, and
  // the gated RMSNorm of its output. So heads go to the pool whole.
  const float q_scale = 1.0f / std::sqrt(float(K));
  for_each_head(pool, H, int64_t(H) * K * K * n, [&](int h) {
    const int64_t c0 = int64_t(h) * K, c1 = c0 + K;
    const float A = std::exp(w.A_log[size_t(h)]);
    for (int64_t t = 0; t < n; ++t) {
      float* qt = q + t * P;
      float* kt = k + t * P;
      short_conv_silu(w.q_conv, c.conv_kernel, s.conv_q, qt, c0, c1);
      short_conv_silu(w.k_conv, c.conv_kernel, s.conv_k, kt, c0, c1);
      short_conv_silu(w.v_conv, c.conv_kernel, s.conv_v, v + t * P, c0, c1);
      float* qh = qt + c0;
      float* kh = kt + c0;
      l2_normalize(qh, K);
      l2_normalize(kh, K);
      for (int d = 0; d < K; ++d) qh[d] *= q_scale;
      float* fh = f + t * P + c0;
      for (int d = 0; d < K; ++d) fh[d] += w.dt_bias[size_t(c0 + d)];
      if (c.kda_lower_bound) {
        for (int d = 0; d < K; ++d) fh[d] = kda_log_decay(c, A, fh[d]);
      } else {  // kda_log_decay's -A softplus_det(z), the softplus over the head at once
        elementwise().softplus(fh, fh, K);
        for (int d = 0; d < K; ++d) fh[d] = -A * fh[d];
      }
      b[t * H + h] = sigmoid(b[t * H + h]);
    }

    KdaHeadInputs in;
    in.q = q + c0;
    in.k = k + c0;
    in.v = v + c0;
    in.log_decay = f + c0;
    in.stride = P;
    in.beta = b + h;
    in.beta_stride = H;
    float* S = &s.state[size_t(h) * K * K];
    if (n > 1 && chunk > 1)
      kda_head_chunked(K, n, in, chunk, S, o + c0);
    else
      kda_head_recurrent(K, n, in, S, o + c0);

    // Gated RMSNorm per token: norm(o) * o_norm * sigmoid(g).
    for (int64_t t = 0; t < n; ++t) {
      float* oh = o + t * P + c0;
      const float* gh = g + t * P + c0;
      rmsnorm(oh, w.o_norm.data(), K, c.rms_eps, oh);
      elementwise().mul_sigmoid(oh, gh, K);
    }
  });
}

void kda_output(const KdaWeights& w, const float* o, int64_t n, float* y) { matmul(w.o_proj, o, n, y); }

}  // namespace waste
