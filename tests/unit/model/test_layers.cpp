// The pieces of the forward pass against values worked out by hand from MODELS.md, and the
// session contract (prefill = token-by-token decode, bounds, errors).
#include <doctest/doctest.h>

#include "tests/unit/fixture_dir.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/model/attn_res.h"
#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "compute/model/ops.h"
#include "compute/model/rope.h"
#include "compute/model/router.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

using namespace waste;

namespace {

ModelConfig k2_like(float factor, float beta_fast) {
  ModelConfig c;
  c.arch = Arch::DeepseekV3;
  c.qk_nope = 128;
  c.qk_rope = 64;
  c.mla_rope = true;
  c.rope_theta = 50000.0f;
  c.yarn = true;
  c.yarn_factor = factor;
  c.yarn_beta_fast = beta_fast;
  c.yarn_beta_slow = 1.0f;
  c.yarn_mscale = c.yarn_mscale_all_dim = 1.0f;
  c.yarn_original_max_positions = 4096;
  return c;
}

float logit_of(float p) { return std::log(p / (1.0f - p)); }

}  // namespace

TEST_CASE("YaRN frequencies and softmax scale of K2 (MODELS.md 2.4-2.5)") {
  const ModelConfig k2 = k2_like(32.0f, 1.0f);
  const Rope rope(k2);
  REQUIRE(rope.inv_freq().size() == 32);
  auto base = [](int i) { return float(1.0 / std::pow(50000.0, 2.0 * i / 64)); };
  // corr_dim = 19.16: dims up to 19 keep their frequency, from 20 on they are divided by 32.
  CHECK(rope.inv_freq()[0] == doctest::Approx(base(0)).epsilon(1e-6));
  CHECK(rope.inv_freq()[19] == doctest::Approx(base(19)).epsilon(1e-6));
  CHECK(rope.inv_freq()[20] == doctest::Approx(base(20) / 32).epsilon(1e-6));
  CHECK(rope.inv_freq()[31] == doctest::Approx(base(31) / 32).epsilon(1e-6));
  CHECK(mla_softmax_scale(k2) == doctest::Approx(0.13086080).epsilon(1e-6));

  // K2.5: beta_fast 32, factor 64: the ramp runs from dim 8 (kept) to 20 (fully divided).
  const ModelConfig k25 = k2_like(64.0f, 32.0f);
  const Rope r25(k25);
  CHECK(r25.inv_freq()[8] == doctest::Approx(base(8)).epsilon(1e-6));
  CHECK(r25.inv_freq()[20] == doctest::Approx(base(20) / 64).epsilon(1e-6));
  const float mid = r25.inv_freq()[14];
  CHECK(mid < base(14));
  CHECK(mid > base(14) / 64);
  CHECK(mla_softmax_scale(k25) == doctest::Approx(0.14467963).epsilon(1e-6));

  // NoPE (Kimi-Linear, K3): no rotation, tau = 192^-0.5.
  ModelConfig nope = k2;
  nope.mla_rope = false;
  CHECK_FALSE(Rope(nope).enabled());
  CHECK(mla_softmax_scale(nope) == doctest::Approx(0.0721688).epsilon(1e-6));
}

TEST_CASE("RoPE rotates interleaved pairs") {
  ModelConfig c = k2_like(1.0f, 1.0f);
  c.yarn = false;
  c.qk_rope = 4;
  c.rope_theta = 10000.0f;
  const Rope rope(c);
  float x[4] = {1.0f, 0.0f, 0.0f, 1.0f};
  rope.apply(x, 3);
  // Pair 0 turns by 3 rad; pair 1 by 3 * 10000^-0.5 = 0.03 rad.
  CHECK(x[0] == doctest::Approx(std::cos(3.0f)));
  CHECK(x[1] == doctest::Approx(std::sin(3.0f)));
  CHECK(x[2] == doctest::Approx(-std::sin(0.03f)));
  CHECK(x[3] == doctest::Approx(std::cos(0.03f)));
}

TEST_CASE("grouped top-k router: groups first, bias selects only, weights renormalised") {
  ModelConfig c;
  c.n_experts = 8;
  c.top_k = 2;
  c.n_group = 4;
  c.topk_group = 2;
  c.routed_scaling = 2.5f;
  // Groups {0,1} {2,3} {4,5} {6,7}; expert 0 is the single best but its group sums lowest
  // among the top three (0.95 + 0.01 < 0.6 + 0.6 and 0.55 + 0.55).
  const float p[8] = {0.95f, 0.01f, 0.6f, 0.6f, 0.55f, 0.55f, 0.3f, 0.3f};
  float logits[8];
  for (int e = 0; e < 8; ++e) logits[e] = logit_of(p[e]);
  std::vector<float> no_bias(8, 0.0f);
  int experts[2];
  float weights[2];
  route_scores(RouterParams::of(c), no_bias, logits, experts, weights);
  CHECK(experts[0] == 2);  // tie: the lower index first
  CHECK(experts[1] == 3);
  CHECK(weights[0] == doctest::Approx(1.25f));
  CHECK(weights[1] == doctest::Approx(1.25f));

  // One group: plain top-k. A bias on expert 6 makes it chosen, but its weight stays
  // its unbiased score 0.3, renormalised against 0.95.
  c.n_group = 1;
  c.topk_group = 1;
  c.routed_scaling = 1.0f;
  std::vector<float> bias(8, 0.0f);
  bias[6] = 1.0f;
  route_scores(RouterParams::of(c), bias, logits, experts, weights);
  CHECK(experts[0] == 6);
  CHECK(experts[1] == 0);
  CHECK(weights[0] == doctest::Approx(0.3f / 1.25f).epsilon(1e-5));
  CHECK(weights[1] == doctest::Approx(0.95f / 1.25f).epsilon(1e-5));
}

TEST_CASE("SiTU and SiLU activations") {
  ModelConfig c;
  c.activation = Activation::SiLU;
  float g[2] = {1.0f, -2.0f}, u[2] = {3.0f, 0.5f}, out[2];
  gated_activation(c, g, u, 2, out);
  CHECK(out[0] == doctest::Approx(3.0f / (1.0f + std::exp(-1.0f))));
  c.activation = Activation::SiTU;
  gated_activation(c, g, u, 2, out);
  const float want = (4.0f * std::tanh(-0.5f) * sigmoid(-2.0f)) * (25.0f * std::tanh(0.5f / 25.0f));
  CHECK(out[1] == doctest::Approx(want));
}

TEST_CASE("attention residual mixes blocks by softmax of normalised scores") {
  const int D = 4;
  const float b0[D] = {1, 1, 1, 1}, partial[D] = {2, -2, 2, -2};
  const float norm[D] = {1, 1, 1, 1}, proj[D] = {1, 0, 0, 0};
  // Normalised keys: b0 -> 1 each, partial -> +-1; scores 1 and 1: equal mixture.
  const float* blocks[1] = {b0};
  float out[D];
  attn_res(blocks, 1, partial, AttnResWeights{norm, proj}, D, 0.0f, out);
  CHECK(out[0] == doctest::Approx(1.5f));
  CHECK(out[1] == doctest::Approx(-0.5f));
}

TEST_CASE("prefill equals token-by-token decode, sessions are independent, bounds are errors") {
  for (const char* name : {"kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    const std::string dir = fixture_dir(name);
    Checkpoint ckpt = Checkpoint::open(dir);
    CheckpointWeights weights(ckpt);
    CheckpointExperts experts(ckpt);
    Model model = Model::create(weights, experts, ckpt.config());
    const auto ids =
        nlohmann::json::parse(read_file_text(dir + "/tokens.json", 1 << 20)).at("input_ids").get<std::vector<int32_t>>();
    const int64_t V = ckpt.config().vocab, n = 12;

    // kda_chunk 1 (the default): prefill runs KDA's recurrence, the same float sums as decode.
    // The chunked form only reorders sums: same argmax, differences of float rounding.
    // Outside 1..kMaxKdaChunk is refused, never clamped: the chunk in use stays as it was.
    for (int bad : {0, -1, kMaxKdaChunk + 1, 65536}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(model.set_kda_chunk(bad), Error);
      CHECK(model.kda_chunk() == 1);
    }
    model.set_kda_chunk(kMaxKdaChunk);
    CHECK(model.kda_chunk() == kMaxKdaChunk);
    for (int kda_chunk : {1, kKdaPrefillChunk}) {
      CAPTURE(kda_chunk);
      model.set_kda_chunk(kda_chunk);
      Session a = model.new_session(n);
      std::vector<float> batch(size_t(n * V));
      model.forward(a, {ids.data(), size_t(n)}, batch.data(), LogitRows::All);

      Session b = model.new_session(n);
      std::vector<float> step(static_cast<size_t>(V));
      double diff = 0, scale = 0;
      for (int64_t t = 0; t < n; ++t) {
        model.forward(b, {&ids[size_t(t)], 1}, step.data());
        const float* row = &batch[size_t(t * V)];
        for (int64_t i = 0; i < V; ++i) {
          diff = std::max(diff, double(std::fabs(step[size_t(i)] - row[i])));
          scale = std::max(scale, double(std::fabs(row[i])));
        }
        CHECK(std::max_element(step.begin(), step.end()) - step.begin() == std::max_element(row, row + V) - row);
      }
      MESSAGE(std::string(name), " kda_chunk ", kda_chunk, ": prefill vs token-by-token max |diff| ", diff,
              " (max |logit| ", scale, ")");
      CHECK(diff <= (kda_chunk == 1 ? 1e-5 : 1e-5 * std::max(1.0, scale) + 2e-5));

      // The context bound and the vocabulary are enforced with errors, not crashes.
      CHECK_THROWS_AS(model.forward(a, {ids.data(), 1}, step.data()), Error);
      Session c = model.new_session(4);
      const int32_t bad = int32_t(V);
      CHECK_THROWS_AS(model.forward(c, {&bad, 1}, step.data()), Error);
    }
  }
}

TEST_CASE("a missing or misshapen tensor fails at create, naming it") {
  Checkpoint ckpt = Checkpoint::open(fixture_dir("kimi-linear"));
  CheckpointWeights weights(ckpt);
  CheckpointExperts experts(ckpt);
  ModelConfig wrong = ckpt.config();
  wrong.kv_lora_rank += 1;
  try {
    Model::create(weights, experts, wrong);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("kv_a_proj_with_mqa") != std::string::npos);
  }
}
