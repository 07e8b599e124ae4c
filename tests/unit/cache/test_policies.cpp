#include <doctest/doctest.h>

#include "iod/cache/expert_cache.h"
#include "iod/cache/frequency_policy.h"
#include "iod/cache/simulate.h"
#include "shared/util/error.h"
#include "tests/unit/cache/trace_helpers.h"

using namespace waste::cache;
using waste::cache::testing::make_trace;

namespace {

// Two MoE layers, top-2: expert 0 of each layer every token, plus a different cold expert.
RoutingTrace hot_and_cold(int tokens) {
  std::vector<std::vector<std::vector<int>>> t;
  for (int i = 0; i < tokens; ++i) t.push_back({{0, 1 + i % 50}, {0, 1 + (i + 25) % 50}});
  return make_trace(t);
}

}  // namespace

TEST_CASE("LRU collapses on a cyclic pattern below one working set; it is exact above") {
  RoutingTrace t = hot_and_cold(200);
  CacheGeometry g = trace_geometry(t);
  auto lru = make_policy("lru", g);
  // 3 slots < 4 per token: every record is evicted just before it comes round again.
  CHECK_EQ(simulate_policy(t, g, 3, *lru).hits, 0);
  // A one-layer loop A B C with 3 slots: all but the compulsory misses hit.
  RoutingTrace loop = make_trace({{{0}}, {{1}}, {{2}}, {{0}}, {{1}}, {{2}}, {{0}}});
  CacheGeometry lg = trace_geometry(loop);
  auto lru2 = make_policy("lru", lg);
  CHECK_EQ(simulate_policy(loop, lg, 3, *lru2).hits, 4);
}

TEST_CASE("frequency policies keep the hot experts below one working set") {
  RoutingTrace t = hot_and_cold(200);
  CacheGeometry g = trace_geometry(t);
  for (const char* spec : {"cyclic", "lrfu"}) {
    CAPTURE(spec);
    auto p = make_policy(spec, g);
    SimResult r = simulate_policy(t, g, 3, *p);
    // Half the accesses are the two hot experts; a policy that keeps both hits all but their
    // first use. 3 slots hold both hot experts plus the current cold one.
    CHECK_EQ(r.accesses, 800);
    CHECK_GE(r.hits, 398 - 2);
    CHECK_LE(r.hits, simulate_belady(t, g, 3, false).hits);
  }
}

TEST_CASE("the cyclic policy's use probability follows the decayed count") {
  CacheGeometry g = CacheGeometry::dense(2, 4, 1);
  FrequencyParams params;
  params.gamma = 0.5;
  FrequencyPolicy p(g, params);
  ExpertCache cache(g, 4, p);
  auto step = [&](uint32_t layer, uint32_t expert) {
    uint32_t e[1] = {expert};
    cache.begin_layer(layer, e);
    Acquired a = cache.acquire({layer, expert});
    cache.unpin(a.slot);
  };
  step(0, 1);
  step(1, 2);
  // Used once: count 1, p = 1 * (1 - 0.5).
  CHECK(p.use_probability({0, 1}) == doctest::Approx(0.5));
  step(0, 1);  // token 1: count 0.5 + 1 = 1.5 -> p 0.75
  CHECK(p.use_probability({0, 1}) == doctest::Approx(0.75));
  // Layer 1 has not come round in token 1 yet, so its key has missed no opportunity.
  CHECK(p.use_probability({1, 2}) == doctest::Approx(0.5));
  step(1, 3);  // layer 1 came round without expert 2: one missed opportunity
  CHECK(p.use_probability({1, 2}) == doctest::Approx(0.25));
}

TEST_CASE("pinned slots are never evicted") {
  CacheGeometry g = CacheGeometry::dense(1, 64, 2);
  for (const std::string& spec : policy_names()) {
    CAPTURE(spec);
    auto policy = make_policy(spec, g);
    ExpertCache cache(g, 3, *policy);
    Acquired a = cache.acquire({0, 7});  // stays pinned throughout
    REQUIRE(a.slot != kNoSlot);
    for (uint32_t e = 10; e < 60; ++e) {
      uint32_t req[1] = {e};
      cache.begin_layer(0, req);
      Acquired b = cache.acquire({0, e});
      REQUIRE(b.slot != kNoSlot);
      CHECK(b.slot != a.slot);
      CHECK_FALSE((b.evicted && b.victim == ExpertKey{0, 7}));
      cache.unpin(b.slot);
      CHECK_EQ(cache.find({0, 7}), a.slot);
    }
    // With every slot pinned there is no victim: the cache says so instead of evicting.
    Acquired c = cache.acquire({0, 61});
    Acquired d = cache.acquire({0, 62});
    REQUIRE(c.slot != kNoSlot);
    REQUIRE(d.slot != kNoSlot);
    CHECK_EQ(cache.acquire({0, 63}).slot, kNoSlot);
    CHECK_EQ(cache.find({0, 7}), a.slot);
  }
}

TEST_CASE("prefetched and pre-warmed records rank below demanded ones") {
  CacheGeometry g = CacheGeometry::dense(1, 64, 1);
  for (const std::string& spec : policy_names()) {
    CAPTURE(spec);
    auto policy = make_policy(spec, g);
    ExpertCache cache(g, 2, *policy);
    uint32_t e1[1] = {1};
    cache.begin_layer(0, e1);
    cache.unpin(cache.acquire({0, 1}).slot);
    cache.insert_guess({0, 2}, InsertKind::Prewarm);
    // Full: the next demand evicts the guess, not the record that was used.
    uint32_t e3[1] = {3};
    cache.begin_layer(0, e3);
    Acquired a = cache.acquire({0, 3});
    REQUIRE(a.evicted);
    CHECK_EQ(a.victim, ExpertKey{0, 2});
  }
}

TEST_CASE("policy specs are parsed and bad ones rejected") {
  CacheGeometry g = CacheGeometry::dense(2, 8, 2);
  CHECK_EQ(make_policy("cyclic:gamma=0.9,prior=2", g)->name(), "cyclic");
  CHECK_THROWS_AS(make_policy("mru", g), waste::Error);
  CHECK_THROWS_AS(make_policy("cyclic:gamma=2", g), waste::Error);
  CHECK_THROWS_AS(make_policy("cyclic:gamma", g), waste::Error);
  CHECK_THROWS_AS(make_policy("cyclic:speed=1", g), waste::Error);
  CHECK_THROWS_AS(make_policy("lru:gamma=0.5", g), waste::Error);
}

TEST_CASE("cyclic policy on the real Kimi-Linear trace") {
  RoutingTrace t = read_routing_trace(waste::cache::testing::shared_trace("kimi-linear-300.jsonl"));
  CacheGeometry g = trace_geometry(t, 256);
  REQUIRE_EQ(g.working_set_slots(), 208);
  auto run = [&](const char* spec, uint32_t slots) {
    auto p = make_policy(spec, g);
    return simulate_policy(t, g, slots, *p).hit_rate();
  };
  double opt_half = simulate_belady(t, g, 104, true).hit_rate();
  double opt_one = simulate_belady(t, g, 208, true).hit_rate();
  double cyc_half = run(kDefaultPolicy, 104), cyc_one = run(kDefaultPolicy, 208);
  MESSAGE("0.5 WS: cyclic " << cyc_half << " optimum " << opt_half << "; 1 WS: cyclic " << cyc_one << " optimum "
                            << opt_one);
  CHECK_EQ(run("lru", 104), 0.0);
  // What this policy measurably reaches (see the report: a policy that only knows each key's
  // history is bounded near 25% / 36% here, the optimum knows the future). The brief's target,
  // 85% of the optimum at 1 WS, is not reached.
  CHECK_GT(cyc_half, 0.22);
  CHECK_GT(cyc_one, 0.60 * opt_one);
  CHECK_GT(cyc_one, run("lru", 208) + 0.05);
}
