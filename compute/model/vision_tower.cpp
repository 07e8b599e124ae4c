#include "compute/model/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "compute/model/ops.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

namespace {

// Upper bound on the patches of one image (the release's processor caps at 65536).
constexpr int64_t kMaxPatches = int64_t(1) << 17;
// Queries whose scores are held at once per head: [kQueryBlock, L] floats.
constexpr int64_t kQueryBlock = 256;

std::string shape_str(int64_t a, int64_t b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + "]"; }

MatrixView mat(const WeightSource& w, const std::string& name, int64_t rows, int64_t cols) {
  MatrixView m = w.matrix(name);
  if (m.rows != rows || m.cols != cols)
    throw Error("tensor " + name + " is " + shape_str(m.rows, m.cols) + ", expected " + shape_str(rows, cols));
  return m;
}

std::span<const float> vec(const WeightSource& w, const std::string& name, int64_t n) {
  std::span<const float> v = w.vector(name);
  if (int64_t(v.size()) != n)
    throw Error("tensor " + name + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(n));
  return v;
}

// y[n, rows] = x[n, cols] W^T on the given pool (or matmul's default without one).
void product(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  if (pool)
    matmul(w, x, n, y, *pool);
  else
    matmul(w, x, n, y);
}

// body(i) for rows i < n, split over the pool when there is one with more than one thread.
void for_rows(ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& body) {
  if (!pool || pool->size() < 2 || n < 2) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  pool->parallel_for(size_t(n), 1, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) body(int64_t(i));
  });
}

inline float gelu_tanh(float z) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * z * (1.0f + std::tanh(k * (z + 0.044715f * z * z * z)));
}

MatrixView f32_view(const float* data, int64_t rows, int64_t cols) {
  MatrixView m;
  m.format = TensorFormat::F32;
  m.rows = rows;
  m.cols = cols;
  m.data = data;
  return m;
}

// cos/sin of the 2D RoPE angles, [L][head_dim/2] each: pair 2i turns by col f_i, pair 2i+1
// by row f_i, f_i = 10000^(-4i/head_dim), i < head_dim/4 (width on even pairs, height on odd).
void rope_tables(int head_dim, int h, int w, std::vector<float>& cos_t, std::vector<float>& sin_t) {
  const int pairs = head_dim / 2, quarter = head_dim / 4;
  const int64_t L = int64_t(h) * w;
  cos_t.resize(size_t(L * pairs));
  sin_t.resize(size_t(L * pairs));
  std::vector<double> f(static_cast<size_t>(quarter));
  for (int i = 0; i < quarter; ++i) f[size_t(i)] = std::pow(10000.0, -4.0 * i / head_dim);
  for (int64_t p = 0; p < L; ++p) {
    const double row = double(p / w), col = double(p % w);
    for (int i = 0; i < quarter; ++i) {
      const double a_col = col * f[size_t(i)], a_row = row * f[size_t(i)];
      cos_t[size_t(p * pairs + 2 * i)] = float(std::cos(a_col));
      sin_t[size_t(p * pairs + 2 * i)] = float(std::sin(a_col));
      cos_t[size_t(p * pairs + 2 * i + 1)] = float(std::cos(a_row));
      sin_t[size_t(p * pairs + 2 * i + 1)] = float(std::sin(a_row));
    }
  }
}

// Pair j = components (2j, 2j+1) as a complex number, times e^{i angle}.
void apply_rope(float* v, const float* cs, const float* sn, int pairs) {
  for (int j = 0; j < pairs; ++j) {
    const float a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * cs[j] - b * sn[j];
    v[2 * j + 1] = a * sn[j] + b * cs[j];
  }
}

// Bilinear source index and weight along one axis, align_corners=False, no antialias.
struct Tap {
  int lo, hi;
  double frac;
};

Tap interp_tap(int i, int out_size, int in_size) {
  const double scale = double(in_size) / double(out_size);
  double src = (i + 0.5) * scale - 0.5;
  if (src < 0) src = 0;
  int lo = std::min(int(src), in_size - 1);
  const int hi = std::min(lo + 1, in_size - 1);
  return {lo, hi, src - lo};
}

}  // namespace

VisionWeights VisionWeights::load(const WeightSource& src, const VisionConfig& c) {
  const int64_t D = c.hidden, Q = c.qkv_hidden, I = c.intermediate;
  VisionWeights w;
  w.patch_embed = mat(src, "vision_tower.patch_embed.proj.weight", D, c.patch_values());
  w.pos_emb = vec(src, "vision_tower.patch_embed.pos_emb.weight", int64_t(c.pos_emb_height) * c.pos_emb_width * D);
  for (int b = 0; b < c.n_layers; ++b) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(b) + ".";
    VisionBlockWeights k;
    k.norm0 = vec(src, p + "norm0.weight", D);
    k.wqkv = mat(src, p + "wqkv.weight", 3 * Q, D);
    k.wo = mat(src, p + "wo.weight", D, Q);
    k.norm1 = vec(src, p + "norm1.weight", D);
    k.fc0 = mat(src, p + "mlp.fc0.weight", I, D);
    k.fc1 = mat(src, p + "mlp.fc1.weight", D, I);
    w.blocks.push_back(k);
  }
  w.final_norm = vec(src, "vision_tower.encoder.final_layernorm.weight", D);
  const int64_t M = c.merged_width();
  w.proj0 = mat(src, "mm_projector.proj.0.weight", M, M);
  w.proj2 = mat(src, "mm_projector.proj.2.weight", c.text_hidden, M);
  w.post_norm = vec(src, "mm_projector.post_norm.weight", c.text_hidden);
  return w;
}

std::vector<float> vision_pos_embedding(const VisionConfig& c, const VisionWeights& w, int h, int wd) {
  const int H0 = c.pos_emb_height, W0 = c.pos_emb_width;
  const int64_t D = c.hidden;
  require(int64_t(w.pos_emb.size()) == int64_t(H0) * W0 * D, "vision_tower.patch_embed.pos_emb.weight: wrong size");
  std::vector<float> out(size_t(int64_t(h) * wd * D));
  const float* g = w.pos_emb.data();
  for (int i = 0; i < h; ++i) {
    const Tap ty = interp_tap(i, h, H0);
    for (int j = 0; j < wd; ++j) {
      const Tap tx = interp_tap(j, wd, W0);
      const float* g00 = g + (int64_t(ty.lo) * W0 + tx.lo) * D;
      const float* g01 = g + (int64_t(ty.lo) * W0 + tx.hi) * D;
      const float* g10 = g + (int64_t(ty.hi) * W0 + tx.lo) * D;
      const float* g11 = g + (int64_t(ty.hi) * W0 + tx.hi) * D;
      const double wy1 = ty.frac, wy0 = 1 - ty.frac, wx1 = tx.frac, wx0 = 1 - tx.frac;
      float* o = &out[size_t((int64_t(i) * wd + j) * D)];
      for (int64_t d = 0; d < D; ++d)
        o[d] = float(wy0 * (wx0 * g00[d] + wx1 * g01[d]) + wy1 * (wx0 * g10[d] + wx1 * g11[d]));
    }
  }
  return out;
}

std::vector<float> vision_tower(const VisionConfig& c, const VisionWeights& w, const float* pixels, int h_patches,
                                int w_patches, ThreadPool* pool) {
  return vision_tower(c, w, pixels, h_patches, w_patches, pool, nullptr, nullptr);
}

std::vector<float> vision_tower(const VisionConfig& c, const VisionWeights& w, const float* pixels, int h, int wd,
                                ThreadPool* pool, std::vector<float>* embed, std::vector<float>* layers,
                                const std::atomic<bool>* cancel) {
  require(h > 0 && wd > 0 && int64_t(h) * wd <= kMaxPatches,
          "vision tower: patch grid " + std::to_string(h) + " x " + std::to_string(wd) + " is empty or too large");
  require(int(w.blocks.size()) == c.n_layers, "vision tower: weights have " + std::to_string(w.blocks.size()) +
                                                  " blocks, config has " + std::to_string(c.n_layers));
  const int64_t L = int64_t(h) * wd, D = c.hidden, Q = c.qkv_hidden, I = c.intermediate;
  const int heads = c.heads, hd = c.head_dim, pairs = hd / 2;
  const float eps = c.tower_eps;
  const float scale = float(1.0 / std::sqrt(double(hd)));

  // Patch embedding (Conv2d with stride = kernel as a product) plus the position grid.
  std::vector<float> x(size_t(L * D));
  product(w.patch_embed, pixels, L, x.data(), pool);
  const std::vector<float> pos = vision_pos_embedding(c, w, h, wd);
  for (size_t i = 0; i < x.size(); ++i) x[i] += pos[i];
  if (embed) *embed = x;
  if (layers) layers->assign(size_t(c.n_layers * L * D), 0.0f);

  std::vector<float> cos_t, sin_t;
  rope_tables(hd, h, wd, cos_t, sin_t);

  std::vector<float> y(size_t(L * D)), qkv(size_t(L * 3 * Q)), o(size_t(L * Q)), z(size_t(L * D));
  std::vector<float> mlp(size_t(L * I));
  std::vector<float> qh(size_t(L * hd)), kh(size_t(L * hd)), vt(size_t(hd * L));
  const int64_t QB = std::min(L, kQueryBlock);
  std::vector<float> scores(size_t(QB * L)), oh(size_t(QB * hd));

  for (int b = 0; b < c.n_layers; ++b) {
    if (cancel && cancel->load()) throw Error("vision tower: cancelled");
    const VisionBlockWeights& k = w.blocks[size_t(b)];
    // Attention.
    for_rows(pool, L, [&](int64_t t) { rmsnorm(&x[size_t(t * D)], k.norm0.data(), int(D), eps, &y[size_t(t * D)]); });
    product(k.wqkv, y.data(), L, qkv.data(), pool);
    for_rows(pool, L, [&](int64_t t) {
      const float* cs = &cos_t[size_t(t * pairs)];
      const float* sn = &sin_t[size_t(t * pairs)];
      float* row = &qkv[size_t(t * 3 * Q)];
      for (int hh = 0; hh < heads; ++hh) {
        apply_rope(row + int64_t(hh) * hd, cs, sn, pairs);      // q
        apply_rope(row + Q + int64_t(hh) * hd, cs, sn, pairs);  // k
      }
    });
    for (int hh = 0; hh < heads; ++hh) {
      // This head's q and k as [L, hd] and v transposed to [hd, L], so that both products
      // (scores = q k^T, out = p v) are ordinary matmuls over contiguous rows.
      for (int64_t t = 0; t < L; ++t) {
        const float* row = &qkv[size_t(t * 3 * Q)];
        std::copy_n(row + int64_t(hh) * hd, hd, &qh[size_t(t * hd)]);
        std::copy_n(row + Q + int64_t(hh) * hd, hd, &kh[size_t(t * hd)]);
        const float* v = row + 2 * Q + int64_t(hh) * hd;
        for (int d = 0; d < hd; ++d) vt[size_t(d * L + t)] = v[d];
      }
      const MatrixView K = f32_view(kh.data(), L, hd), VT = f32_view(vt.data(), hd, L);
      for (int64_t q0 = 0; q0 < L; q0 += QB) {
        const int64_t nq = std::min(QB, L - q0);
        product(K, &qh[size_t(q0 * hd)], nq, scores.data(), pool);
        for_rows(pool, nq, [&](int64_t r) {
          float* s = &scores[size_t(r * L)];
          for (int64_t j = 0; j < L; ++j) s[j] *= scale;
          softmax(s, int(L));
        });
        product(VT, scores.data(), nq, oh.data(), pool);
        for (int64_t r = 0; r < nq; ++r)
          std::copy_n(&oh[size_t(r * hd)], hd, &o[size_t((q0 + r) * Q + int64_t(hh) * hd)]);
      }
    }
    product(k.wo, o.data(), L, z.data(), pool);
    for (size_t i = 0; i < x.size(); ++i) x[i] += z[i];
    // MLP with the tanh GELU.
    for_rows(pool, L, [&](int64_t t) { rmsnorm(&x[size_t(t * D)], k.norm1.data(), int(D), eps, &y[size_t(t * D)]); });
    product(k.fc0, y.data(), L, mlp.data(), pool);
    for_rows(pool, L, [&](int64_t t) {
      float* m = &mlp[size_t(t * I)];
      for (int64_t i = 0; i < I; ++i) m[i] = gelu_tanh(m[i]);
    });
    product(k.fc1, mlp.data(), L, z.data(), pool);
    for (size_t i = 0; i < x.size(); ++i) x[i] += z[i];
    if (layers) std::copy(x.begin(), x.end(), layers->begin() + int64_t(b) * L * D);
  }
  for_rows(pool, L, [&](int64_t t) { rmsnorm(&x[size_t(t * D)], w.final_norm.data(), int(D), eps, &x[size_t(t * D)]); });
  return x;
}

}  // namespace waste
