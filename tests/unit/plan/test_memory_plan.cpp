#include <doctest/doctest.h>

#include <string>

#include "shared/container/format.h"
#include "shared/model/presets.h"
#include "shared/model/tensors.h"
#include "shared/model/trunk_storage.h"
#include "shared/model/vision_config.h"
#include "shared/plan/memory_plan.h"
#include "shared/rvq/kernels.h"
#include "shared/util/error.h"

using namespace waste;
using namespace waste::plan;

namespace {

constexpr uint64_t GiB = 1ull << 30, MiB = 1ull << 20;

PlanRequest preset_request(const std::string& name) {
  PlanRequest r;
  r.config = ModelConfig::from_json(preset_config_json(name), name);
  r.trunk_bytes = trunk_resident_bytes(r.config, TrunkStorage{});
  r.mla_cache = MlaCacheFormat::BF16;  // q4g matrices, kv_b_proj included (shared/model/mla_cache.h)
  r.record_stride =
      record_layout(TensorFormat::VQ3R, uint32_t(r.config.expert_hidden()), uint32_t(r.config.moe_intermediate)).stride;
  return r;
}

UsableMemory ram(uint64_t bytes) {
  UsableMemory u;
  u.physical = u.usable = bytes;
  u.source = "test";
  return u;
}

}  // namespace

TEST_CASE("Kimi-Linear-48B: records, working set and session state match MODELS.md") {
  PlanRequest r = preset_request("kimi-linear-48b");
  // 3.0 bpw payload of one expert is 2,654,208 B (MODELS.md 7.2); the record adds a header,
  // f16 row scales and 4 KiB alignment.
  CHECK_GE(r.record_stride, 2654208);
  CHECK_LE(r.record_stride, 2654208 + 16384);
  CHECK_EQ(r.record_stride % 4096, 0);
  SessionState s = session_state(r.config, r.mla_cache);
  CHECK_EQ(s.mla_bytes_per_token, 7 * 576 * 2);       // 7 MLA layers, bf16 latent + rope key (q4g trunk)
  CHECK_EQ(session_state(r.config, MlaCacheFormat::F32).mla_bytes_per_token, 7 * 576 * 4);  // lossless trunk
  CHECK_EQ(s.kda_state_bytes, 20ull * 2 * MiB);       // 20 KDA layers x 32x128x128 f32
  CHECK_EQ(s.kda_conv_bytes, 20ull * 3 * 4096 * 3 * 4);
  // Trunk as stored by default (q4g-32 matrices, 4.5 bits a weight: ~1.06 GiB; q8g head, f32
  // routers and vectors add a little).
  CHECK_GT(r.trunk_bytes, uint64_t(0.9 * GiB));
  CHECK_LT(r.trunk_bytes, uint64_t(1.3 * GiB));

  r.context = 8192;
  MemoryPlan p = make_plan(r, ram(24 * GiB));
  CHECK_EQ(p.working_set_records, 208);
  CHECK_EQ(p.working_set_bytes, 208 * r.record_stride);
  CHECK_EQ(p.experts_in_flight, 8 * r.record_stride);
  CHECK_EQ(p.floor, p.trunk + p.session_state + p.scratch + p.experts_in_flight + p.prompt_cache);
  // The prompt cache by default: two full-context session states.
  CHECK_EQ(p.prompt_cache, 2 * s.bytes(8192));
  CHECK_EQ(p.session_state, s.bytes(8192));
  // 24 GiB: 3 working sets (~1.6 GiB) fit easily under 21 GiB.
  CHECK_EQ(p.cache, 3 * p.working_set_bytes);
  CHECK_EQ(p.slots, 8 + 3 * 208);
  CHECK_EQ(p.total, p.floor + p.cache);
  CHECK(p.fits);

  // The planner takes the contexts an instance takes (option_limits.h), no more.
  r.context = uint64_t(limits::kMaxContextTokens);
  CHECK_NOTHROW(make_plan(r, ram(1024 * GiB)));
  r.context = uint64_t(limits::kMaxContextTokens) + 1;
  CHECK_THROWS_WITH_AS(make_plan(r, ram(1024 * GiB)), doctest::Contains("--ctx"), Error);
}

TEST_CASE("Kimi K3: per-token routed read is 16.98 GiB (MODELS.md 7.3)") {
  PlanRequest r = preset_request("kimi-k3");
  MemoryPlan p = make_plan(r, ram(1024 * GiB));
  CHECK_EQ(p.working_set_records, 16 * 92);
  // 1472 x 12,386,304 B of 3.0 bpw payload = 16.98 GiB; records carry a little overhead.
  double payload = 1472.0 * 12386304.0;
  CHECK(payload / GiB == doctest::Approx(16.98).epsilon(0.001));
  CHECK_GE(double(p.working_set_bytes), payload);
  CHECK_LE(double(p.working_set_bytes), payload * 1.005);
  SessionState s = session_state(r.config, r.mla_cache);
  CHECK_EQ(s.kda_state_bytes, 69ull * 6 * MiB);       // 414 MiB
  CHECK_EQ(s.mla_bytes_per_token, 24 * 576 * 2);      // NoPE MLA still caches the 64-dim key part (bf16)
  // Trunk as `waste convert` stores it by default: q4g-32 matrices (4.5 bits a weight with the
  // f16 scales), a q8g-32 head (8.5 bits), f32 routers (92 x 896 x 7168), f32 vectors, the
  // embedding on disk: 31.60 GiB (a uniform 4.0 bpw trunk would be 26.42 GiB, MODELS.md 7.3).
  CHECK(double(p.trunk) / GiB == doctest::Approx(31.60).epsilon(0.001));
  CHECK_EQ(p.cache, 3 * p.working_set_bytes);
  // Every K3 matrix's width is a multiple of 128, so --trunk-group 128 saves exactly 3/8 bit
  // (16 bits per 32 inputs against per 128) on each matrix weight, and bf16 routers 2 bytes on
  // each router weight.
  uint64_t matrix_weights = 0;
  for (const TensorSpec& t : trunk_tensor_specs(r.config))
    if (t.role == TensorRole::Matrix) matrix_weights += t.elements();
  CHECK(double(matrix_weights) / 1e9 == doctest::Approx(54.2).epsilon(0.01));
  TrunkStorage wide;
  wide.group = 128;
  CHECK_EQ(p.trunk - trunk_resident_bytes(r.config, wide), matrix_weights * 3 / 64);
  wide.router = TensorFormat::BF16;
  const uint64_t router_weights = 92ull * 896 * 7168;
  CHECK_EQ(p.trunk - trunk_resident_bytes(r.config, wide), matrix_weights * 3 / 64 + router_weights * 2);
  CHECK(double(trunk_resident_bytes(r.config, wide)) / GiB == doctest::Approx(28.15).epsilon(0.001));

  // Those are K3's defaults (a quantized trunk over kLargeTrunkBytes); flags given win.
  const TrunkStorage k3 = trunk_storage_for(r.config, TensorFormat::Q4G, std::nullopt, std::nullopt, std::nullopt);
  CHECK_EQ(k3.group, 128u);
  CHECK(k3.router == TensorFormat::Q8G);
  // q8g-32 routers: a byte a weight and an f16 scale per 32, against bf16's two bytes.
  CHECK_EQ(trunk_resident_bytes(r.config, wide) - trunk_resident_bytes(r.config, k3), router_weights * 15 / 16);
  // At 4K context K3's comparable floor (no prompt cache, no vision) is under the original C
  // engine's 29.05 GiB for the same model (its trunk 27.28 GiB with 4-bit routers, state, scratch,
  // 2 x top_k records of cache; docs/MEASUREMENTS.md).
  // With 16 compute threads (a consumer machine's), whatever this host has: the floor must not
  // depend on where the test runs.
  PlanRequest k3r = r;
  k3r.trunk_bytes = trunk_resident_bytes(r.config, k3);
  k3r.threads = 16;
  const MemoryPlan k3p = make_plan(k3r, ram(512 * GiB));
  CHECK(double(k3p.comparable_floor) / GiB < 29.05);
  // Each compute thread keeps kThreadExpertRows rows of an expert's buffers (the experts of a
  // batch run side by side): the scratch line grows by exactly that per thread.
  PlanRequest k3r1 = k3r;
  k3r1.threads = 1;
  const MemoryPlan k3p1 = make_plan(k3r1, ram(512 * GiB));
  CHECK_EQ(k3p.scratch - k3p1.scratch, 15ull * kThreadExpertRows * expert_scratch_row_bytes(r.config));
  CHECK_EQ(k3p.threads, 16u);
  k3r1.threads = 0;
  CHECK_THROWS_WITH_AS(make_plan(k3r1, ram(512 * GiB)), doctest::Contains("compute threads"), Error);
  const TrunkStorage chosen = trunk_storage_for(r.config, TensorFormat::Q4G, std::nullopt, 32u, TensorFormat::F32);
  CHECK_EQ(chosen.group, 32u);
  CHECK(chosen.router == TensorFormat::F32);
  // An unquantized trunk is asked for as lossless: f32 routers whatever the size.
  const TrunkStorage lossless = trunk_storage_for(r.config, TensorFormat::F32, std::nullopt, std::nullopt, std::nullopt);
  CHECK(lossless.router == TensorFormat::F32);
  // Kimi-Linear and K2 are under the line: the small-model defaults.
  for (const char* name : {"kimi-linear-48b", "kimi-k2"}) {
    CAPTURE(name);
    const ModelConfig c = ModelConfig::from_json(preset_config_json(name), name);
    CHECK_LT(trunk_resident_bytes(c, TrunkStorage{}), kLargeTrunkBytes);
    const TrunkStorage small = trunk_storage_for(c, TensorFormat::Q4G, std::nullopt, std::nullopt, std::nullopt);
    CHECK_EQ(small.group, kTrunkGroup);
    CHECK(small.router == TensorFormat::F32);
  }
  CHECK_EQ(p.cache, 3 * p.working_set_bytes);
}

TEST_CASE("Kimi K2: MLA latent cache in bf16 is 70,272 B per token (140,544 in f32)") {
  PlanRequest r = preset_request("kimi-k2");
  CHECK_EQ(session_state(r.config, r.mla_cache).mla_bytes_per_token, 61 * 1152);
  CHECK_EQ(session_state(r.config, MlaCacheFormat::F32).mla_bytes_per_token, 61 * 2304);
  CHECK_EQ(session_state(r.config, r.mla_cache).kda_state_bytes, 0);
  MemoryPlan p = make_plan(r, ram(512 * GiB));
  CHECK_EQ(p.working_set_records, 8 * 60);
}

TEST_CASE("the auto budget steps down by whole working sets, then stops at the floor") {
  PlanRequest r = preset_request("kimi-linear-48b");
  MemoryPlan big = make_plan(r, ram(64 * GiB));
  uint64_t floor = big.floor, ws = big.working_set_bytes;
  auto usable_for = [](uint64_t total) { return total / 7 * 8 + 8; };  // 7/8 of it is >= total
  CHECK_EQ(make_plan(r, ram(usable_for(floor + 3 * ws))).cache, 3 * ws);
  CHECK_EQ(make_plan(r, ram(usable_for(floor + 3 * ws) - 64)).cache, 2 * ws);
  CHECK_EQ(make_plan(r, ram(usable_for(floor + 2 * ws) - 64)).cache, 1 * ws);
  MemoryPlan none = make_plan(r, ram(usable_for(floor + ws) - 64));
  CHECK_EQ(none.cache, 0);
  CHECK_EQ(none.total, floor);
  CHECK_EQ(none.slots, 8);
}

TEST_CASE("an explicit budget under the floor is refused with the breakdown") {
  PlanRequest r = preset_request("kimi-linear-48b");
  MemoryPlan p = make_plan(r, ram(64 * GiB));
  r.budget = p.floor - 1;
  try {
    make_plan(r, ram(64 * GiB));
    FAIL("no error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("under the floor") != std::string::npos);
    CHECK(m.find("trunk") != std::string::npos);
    CHECK(m.find("session state") != std::string::npos);
    CHECK(m.find("experts in flight") != std::string::npos);
  }
  // A budget over the floor gives whole slots.
  r.budget = p.floor + 10 * r.record_stride + 123;
  MemoryPlan q = make_plan(r, ram(64 * GiB));
  CHECK_EQ(q.cache, 10 * r.record_stride);
  CHECK_EQ(q.slots, 18);
  CHECK_FALSE(q.auto_budget);
}

TEST_CASE("more context and sessions raise the floor by the per-token state") {
  PlanRequest r = preset_request("kimi-linear-48b");
  r.context = 1000;
  MemoryPlan a = make_plan(r, ram(64 * GiB));
  r.context = 2000;
  r.sessions = 2;
  MemoryPlan b = make_plan(r, ram(64 * GiB));
  SessionState s = session_state(r.config, r.mla_cache);
  CHECK_EQ(b.session_state, 2 * s.bytes(2000));
  CHECK_GT(b.scratch, a.scratch);
}

TEST_CASE("sizes") {
  CHECK_EQ(parse_size("12G"), 12 * GiB);
  CHECK_EQ(parse_size("900M"), 900 * MiB);
  CHECK_EQ(parse_size("1.5GiB"), 3 * GiB / 2);
  CHECK_EQ(parse_size("4096"), 4096);
  CHECK_EQ(parse_size("2t"), 2048 * GiB);
  CHECK_THROWS_AS(parse_size("12X"), Error);
  CHECK_THROWS_AS(parse_size("G"), Error);
  CHECK_THROWS_AS(parse_size(""), Error);
  CHECK_THROWS_AS(parse_size("1e30"), Error);
}

TEST_CASE("the vision tower is its own line of the floor: weights plus one image's activations") {
  const std::string k3 = preset_config_json("kimi-k3");
  const VisionConfig v = VisionConfig::from_json(k3, "kimi-k3");
  // compute/model/vision_tower.cpp's buffers at 1024 patches of the release's tower, in floats:
  // pixels 1024 x 588, x/y/z/position grid 4 x 1024 x 1024, qkv 1024 x 4608, attention output
  // 1024 x 1536, MLP 1024 x 4096, one head's q/k/v^T and the RoPE tables 4 x 1024 x 128, one
  // query block's scores 256 x 1024 and output 256 x 128, the image's 256 rows of 7168; plus the
  // int8 copy of the widest input (1024 x 4096 x 11/8 bytes).
  const uint64_t floats = 1024ull * 588 + 4ull * 1024 * 1024 + 1024ull * 4608 + 1024ull * 1536 + 1024ull * 4096 +
                          4ull * 1024 * 128 + 256ull * 1024 + 256ull * 128 + 256ull * 7168;
  CHECK_EQ(vision_activation_bytes(v), floats * 4 + 1024ull * 4096 * 11 / 8);
  CHECK_EQ(vision_activation_bytes(v), 77512704ull);  // 73.9 MiB
  // Linear in the patches: the scores are held for one block of 256 queries at a time.
  CHECK_GT(vision_activation_bytes(v, 4096), 3 * vision_activation_bytes(v, 1024));
  CHECK_LT(vision_activation_bytes(v, 4096), 5 * vision_activation_bytes(v, 1024));

  PlanRequest r = preset_request("kimi-k3");
  const MemoryPlan without = make_plan(r, ram(1024 * GiB));
  CHECK_EQ(without.vision, 0);
  r.vision_weight_bytes = 487831552;  // the release's tower in q8g (waste info of a synth kimi-k3: 465.23 MiB)
  r.vision_activation_bytes = vision_activation_bytes(v);
  r.vision_source = "test";
  const MemoryPlan with = make_plan(r, ram(1024 * GiB));
  CHECK_EQ(with.vision_weights, r.vision_weight_bytes);
  CHECK_EQ(with.vision_activations, r.vision_activation_bytes);
  CHECK_EQ(with.vision, r.vision_weight_bytes + r.vision_activation_bytes);
  CHECK_EQ(with.floor, without.floor + with.vision);
  CHECK_EQ(with.floor, with.trunk + with.session_state + with.scratch + with.experts_in_flight + with.prompt_cache +
                           with.vision);
  // The comparable floor leaves out the prompt cache and the vision line, and nothing else.
  CHECK_EQ(with.comparable_floor, with.trunk + with.session_state + with.scratch + with.experts_in_flight);
  CHECK_EQ(with.comparable_floor, without.comparable_floor);
  CHECK_EQ(with.floor - with.comparable_floor, with.prompt_cache + with.vision);
  CHECK_GT(with.prompt_cache, 0u);
  CHECK_EQ(with.trunk, without.trunk);  // the tower is not part of the trunk figure
  // The refusal of a budget under the floor names the vision line.
  r.budget = with.floor - 1;
  CHECK_THROWS_WITH_AS(make_plan(r, ram(1024 * GiB)), doctest::Contains("+ vision "), Error);
}
