// MLA attention kernels (attention_kernels.h): scores and weighted latent sums of every SIMD
// path the CPU has against scalar, at Kimi-Linear's row width and at widths with tails; and
// mla_forward with heads on a pool against the calling thread alone (bit for bit).
#include <doctest/doctest.h>

#include "tests/unit/model/kernel_compare.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compute/model/attention_kernels.h"
#include "compute/model/mla.h"
#include "compute/model/ops.h"
#include "tests/support/layer_forward.h"
#include "shared/util/half.h"
#include "shared/util/thread_pool.h"

using namespace waste;
using namespace waste::test;

namespace {

}  // namespace

TEST_CASE("MLA scores and weighted sums: SIMD paths = scalar within 1e-5 relative") {
  const std::vector<SimdLevel> levels = simd_levels_of_cpu();
  if (levels.empty()) MESSAGE("no SIMD path on this CPU: only scalar is used");
  struct Shape {
    int width, r, G;
    int64_t len;
  };
  for (const Shape sh : {Shape{576, 512, 4, 67}, Shape{37, 29, 3, 5}, Shape{72, 64, 1, 1}, Shape{576, 512, 16, 130}})
    for (SimdLevel level : levels) {
      CAPTURE(simd_level_name(level));
      CAPTURE(sh.width);
      CAPTURE(sh.G);
      std::mt19937 rng(uint32_t(sh.width * 7 + sh.G));
      const int64_t q_stride = sh.width + 3;  // strides unlike the widths, as in mla.cpp
      const std::vector<float> q = randn(size_t(sh.G) * q_stride, rng);
      const std::vector<float> rows = randn(size_t(sh.len) * sh.width, rng);
      const float scale = 1.0f / std::sqrt(float(sh.width));
      std::vector<float> p_ref(size_t(sh.G) * sh.len), p(p_ref.size());
      mla_scores(SimdLevel::Scalar, sh.G, q.data(), q_stride, rows.data(), sh.len, sh.width, scale, p_ref.data(), sh.len);
      mla_scores(level, sh.G, q.data(), q_stride, rows.data(), sh.len, sh.width, scale, p.data(), sh.len);
      CHECK(rel_err(p, p_ref) <= 1e-5);

      for (int g = 0; g < sh.G; ++g) softmax(&p_ref[size_t(g) * sh.len], int(sh.len));
      const std::vector<float> o0 = randn(size_t(sh.G) * sh.r, rng);  // the sums accumulate
      std::vector<float> o_ref = o0, o = o0;
      mla_weighted_sum(SimdLevel::Scalar, sh.G, p_ref.data(), sh.len, rows.data(), sh.len, sh.width, sh.r, o_ref.data(),
                       sh.r);
      mla_weighted_sum(level, sh.G, p_ref.data(), sh.len, rows.data(), sh.len, sh.width, sh.r, o.data(), sh.r);
      CHECK(rel_err(o, o_ref) <= 1e-5);
      CHECK(o_ref != o0);
    }
}

TEST_CASE("MLA kernels over a bf16 cache: each path = the f32 path on the same values (widened), bit for bit") {
  // A bf16 row widens exactly to f32, and the bf16 kernels then do the f32 kernels' arithmetic
  // in their order: on the rows rounded to bf16 and stored both ways, every path (scalar
  // included) gives the same bits from either.
  std::vector<SimdLevel> levels = simd_levels_of_cpu();
  levels.push_back(SimdLevel::Scalar);
  for (const int width : {576, 37, 72})
    for (SimdLevel level : levels) {
      CAPTURE(simd_level_name(level));
      CAPTURE(width);
      const int r = width - 8, G = 3;
      const int64_t len = 41;
      std::mt19937 rng{uint32_t(width)};
      const std::vector<float> q = randn(size_t(G) * width, rng);
      const std::vector<float> wide = randn(size_t(len) * width, rng);
      std::vector<uint16_t> bf16(wide.size());
      std::vector<float> rounded(wide.size());
      for (size_t i = 0; i < wide.size(); ++i) {
        bf16[i] = f32_to_bf16(wide[i]);
        rounded[i] = bf16_to_f32(bf16[i]);
      }
      std::vector<float> p32(size_t(G) * len), p16(p32.size());
      mla_scores(level, G, q.data(), width, rounded.data(), len, width, 0.1f, p32.data(), len);
      mla_scores(level, G, q.data(), width, bf16.data(), len, width, 0.1f, p16.data(), len);
      CHECK(p16 == p32);
      for (int g = 0; g < G; ++g) softmax(&p32[size_t(g) * len], int(len));
      std::vector<float> o32(size_t(G) * r, 0.5f), o16 = o32;
      mla_weighted_sum(level, G, p32.data(), len, rounded.data(), len, width, r, o32.data(), r);
      mla_weighted_sum(level, G, p32.data(), len, bf16.data(), len, width, r, o16.data(), r);
      CHECK(o16 == o32);
      CHECK(o32 != std::vector<float>(size_t(G) * r, 0.5f));
    }
}

TEST_CASE("mla_forward: heads on a pool = the calling thread alone, prefill and decode, bit for bit") {
  ModelConfig c;
  c.hidden = 32;
  c.n_heads = 8;
  c.qk_nope = 16;
  c.qk_rope = 8;
  c.v_head = 16;
  c.kv_lora_rank = 64;
  c.q_lora_rank = 0;
  c.rms_eps = 1e-6f;
  c.mla_rope = false;  // NoPE (Kimi-Linear): the rope part still enters the scores
  const int D = c.hidden, H = c.n_heads, qk = c.qk_nope + c.qk_rope, r = c.kv_lora_rank;
  std::mt19937 rng(5);
  std::vector<std::vector<float>> store;
  store.reserve(8);
  auto mat = [&](int64_t rows, int64_t cols) {
    store.push_back(randn(size_t(rows * cols), rng, 1.0f / std::sqrt(float(cols))));
    MatrixView m;
    m.rows = rows;
    m.cols = cols;
    m.data = store.back().data();
    return m;
  };
  MlaWeights w;
  w.q_proj = mat(int64_t(H) * qk, D);
  w.kv_a = mat(r + c.qk_rope, D);
  store.push_back(std::vector<float>(size_t(r), 1.0f));
  w.kv_a_norm = store.back();
  w.kv_b = mat(int64_t(H) * (c.qk_nope + c.v_head), r);
  w.o_proj = mat(D, int64_t(H) * c.v_head);
  const Rope rope(c);
  const float scale = mla_softmax_scale(c);

  // A prompt long enough that prefill and the decode steps after it both go to the pool.
  const int64_t prompt = 460, decode = 3, ctx = prompt + decode;
  const std::vector<float> x = randn(size_t(ctx) * D, rng);
  ThreadPool pool(2);
  MlaCache alone, pooled;
  std::vector<float> y_alone(x.size()), y_pooled(x.size());
  mla_forward(c, w, rope, scale, alone, ctx, 0, x.data(), prompt, y_alone.data(), nullptr);
  mla_forward(c, w, rope, scale, pooled, ctx, 0, x.data(), prompt, y_pooled.data(), &pool);
  for (int64_t t = prompt; t < ctx; ++t) {
    mla_forward(c, w, rope, scale, alone, ctx, t, &x[size_t(t) * D], 1, &y_alone[size_t(t) * D], nullptr);
    mla_forward(c, w, rope, scale, pooled, ctx, t, &x[size_t(t) * D], 1, &y_pooled[size_t(t) * D], &pool);
  }
  CHECK(y_pooled == y_alone);
  CHECK(pooled.rows == alone.rows);
  CHECK(std::any_of(y_alone.begin(), y_alone.end(), [](float v) { return v != 0.0f; }));
}
