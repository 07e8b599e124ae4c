#include <doctest/doctest.h>

#include "iod/cache/expert_cache.h"
#include "iod/cache/forecast_policy.h"
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
  for (std::string spec : {"forecast", "cyclic", "lrfu"}) {
    CAPTURE(spec);
    auto p = make_policy(spec, g);
    SimResult r = simulate_policy(t, g, 3, *p);
    // Half the accesses are the two hot experts; a policy that keeps both hits all but their
    // first use. 3 slots hold both hot experts plus the current cold one.
    CHECK_EQ(r.accesses, 800);
    // forecast first has to learn which history predicts a use (its class table starts empty):
    // a few more early misses.
    CHECK_GE(r.hits, 398 - (spec == "forecast" ? 5 : 2));
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
    // The C engine's rule gives a speculative read hits = 1 and the current clock, like a
    // demand read (ecache.c ec_claim_spec): lfru reproduces it and does not rank guesses lower.
    if (spec == "lfru") continue;
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

TEST_CASE("forecast learns per-class use probabilities, computed by hand") {
  // One layer, 4 experts, top-1: base rate 1/4, smoothing weight 2 (forecast_policy.cpp).
  CacheGeometry g = CacheGeometry::dense(1, 4, 1);
  ForecastPolicy p(g, ForecastParams{});
  ExpertCache cache(g, 4, p);
  auto visit = [&](uint32_t expert) {
    uint32_t e[1] = {expert};
    cache.begin_layer(0, e);
    cache.unpin(cache.acquire({0, expert}).slot);
  };
  CHECK(p.use_probability({0, 1}) == doctest::Approx(0.25));  // nothing learned: the base rate
  visit(0);
  // 4 samples of the empty history, 1 routed to: (1 + 2/4) / (4 + 2).
  CHECK(p.use_probability({0, 1}) == doctest::Approx(0.25));
  visit(0);
  // Empty history: 7 samples, 1 routed to. Its parent (the same recent bits, any older count)
  // has the same samples: (1 + 2 * 0.25) / (7 + 2) = 1/6; the class leans on the parent:
  // (1 + 2 * 1/6) / (7 + 2). Expert 0 now has history "used, used", never sampled: the base rate.
  CHECK(p.use_probability({0, 1}) == doctest::Approx((1 + 2 * (1.5 / 9)) / 9));
  CHECK(p.use_probability({0, 0}) == doctest::Approx(0.25));
  visit(0);
  // "used, used" was sampled once, routed to: (1 + 0.5) / (1 + 2) for a key with that history...
  // which no key has any more (expert 0 moved on to "used x3"); "used x3" is unsampled.
  CHECK(p.use_probability({0, 0}) == doctest::Approx(0.25));
  // Empty history: 10 samples, 1 routed to; parent (1 + 0.5) / 12.
  CHECK(p.use_probability({0, 2}) == doctest::Approx((1 + 2 * (1.5 / 12)) / 12));
}

TEST_CASE("forecast: with equal estimates the record whose layer comes round last goes") {
  // Three MoE layers, top-1. Token 0 routes expert 1 everywhere; 3 slots hold all of it.
  CacheGeometry g = CacheGeometry::dense(3, 8, 1);
  auto p = make_policy("forecast", g);
  ExpertCache cache(g, 3, *p);
  for (uint32_t l = 0; l < 3; ++l) {
    uint32_t e[1] = {1};
    cache.begin_layer(l, e);
    cache.unpin(cache.acquire({l, 1}).slot);
  }
  // Token 1, layer 0 routes experts 1 and 2: (0, 1) hits and stays pinned; (0, 2) needs a
  // slot. (1, 1) and (2, 1) have the same history; layer 2 comes round after layer 1.
  uint32_t e[2] = {1, 2};
  cache.begin_layer(0, e);
  Acquired hit = cache.acquire({0, 1});
  CHECK(hit.hit);
  Acquired miss = cache.acquire({0, 2});
  REQUIRE(miss.evicted);
  CHECK_EQ(miss.victim, ExpertKey{2, 1});
}

TEST_CASE("forecast never evicts a record the layer being fetched still has to pin") {
  // Two MoE layers, 8 experts, 3 slots. Token 0: layer 0 routes 1 and 2, layer 1 routes 1.
  CacheGeometry g = CacheGeometry::dense(2, 8, 2);
  auto p = make_policy("forecast", g);
  ExpertCache cache(g, 3, *p);
  auto fetch = [&](uint32_t layer, std::vector<uint32_t> experts) {
    cache.begin_layer(layer, experts);
    std::vector<Acquired> out;
    for (uint32_t e : experts) out.push_back(cache.acquire({layer, e}));
    for (const Acquired& a : out) cache.unpin(a.slot);
    return out;
  };
  fetch(0, {1, 2});
  fetch(1, {1});
  // Token 1, layer 0 routes 3 then 1. Acquiring 3 must not evict (0, 1), which has the longest
  // distance to its next visit like every record of the current layer, but is needed next.
  std::vector<Acquired> got = fetch(0, {3, 1});
  REQUIRE(got[0].evicted);
  CHECK_EQ(got[0].victim, ExpertKey{0, 2});
  CHECK(got[1].hit);
}

TEST_CASE("forecast on a cyclic scan below one working set: LRU gets nothing, forecast the optimum") {
  // One layer, top-1, 3 experts in a loop A B C A B C ... (60 accesses) and 2 slots: LRU
  // always evicts the record needed next.
  std::vector<std::vector<std::vector<int>>> tokens;
  for (int t = 0; t < 60; ++t) tokens.push_back({{t % 3}});
  RoutingTrace t = make_trace(tokens);
  CacheGeometry g = trace_geometry(t);
  auto lru = make_policy("lru", g);
  CHECK_EQ(simulate_policy(t, g, 2, *lru).hits, 0);
  // Belady, the missed record always cached: A, B miss; C evicts B (A is needed first), A hits;
  // B evicts A, C hits; A evicts C, B hits; ... from the third access on, miss and hit
  // alternate: 58 / 2 = 29 hits.
  SimResult opt = simulate_belady(t, g, 2, false);
  CHECK_EQ(opt.hits, 29);
  auto forecast = make_policy("forecast", g);
  SimResult r = simulate_policy(t, g, 2, *forecast);
  CHECK_GE(r.hits, opt.hits - 3);  // it learns the loop within a few tokens
  CHECK_LE(r.hits, opt.hits);
}

TEST_CASE("forecast is deterministic") {
  RoutingTrace t = read_routing_trace(waste::cache::testing::shared_trace("olmoe-299.jsonl"));
  CacheGeometry g = trace_geometry(t);
  auto a = make_policy("forecast", g), b = make_policy("forecast", g);
  SimResult ra = simulate_policy(t, g, 100, *a), rb = simulate_policy(t, g, 100, *b);
  CHECK_EQ(ra.hits, rb.hits);
  // The same policy object after reset (a new cache) replays identically.
  CHECK_EQ(simulate_policy(t, g, 100, *a).hits, ra.hits);
}

TEST_CASE("default policy on the real traces") {
  // The measured figures (docs/MEASUREMENTS.md): forecast reaches 0.64-0.86 of Belady's
  // optimum on Kimi-Linear, 0.67-1.0 on OLMoE; the bar (0.85 at every size) is not met
  // below 8 working sets. These bounds hold the measured level with a small margin.
  struct Case {
    const char* file;
    uint32_t ws_slots;
    double min_half, min_ratio_one;
  };
  for (const Case& c : {Case{"kimi-linear-300.jsonl", 208, 0.235, 0.66}, Case{"olmoe-299.jsonl", 128, 0.255, 0.71}}) {
    std::string file = c.file;
    CAPTURE(file);
    RoutingTrace t = read_routing_trace(waste::cache::testing::shared_trace(c.file));
    CacheGeometry g = trace_geometry(t);
    REQUIRE_EQ(g.working_set_slots(), c.ws_slots);
    auto run = [&](const char* spec, uint32_t slots) {
      auto p = make_policy(spec, g);
      return simulate_policy(t, g, slots, *p).hit_rate();
    };
    uint32_t half = c.ws_slots / 2, one = c.ws_slots;
    double opt_one = simulate_belady(t, g, one, true).hit_rate();
    double def_half = run(kDefaultPolicy, half), def_one = run(kDefaultPolicy, one);
    MESSAGE(c.file << ": 0.5 WS " << def_half << " (optimum " << simulate_belady(t, g, half, true).hit_rate()
                   << "), 1 WS " << def_one << " (optimum " << opt_one << ")");
    CHECK_EQ(run("lru", half), 0.0);
    CHECK_GT(def_half, c.min_half);
    CHECK_GT(def_one, c.min_ratio_one * opt_one);
    // Better than the previous default and than LRU.
    CHECK_GT(def_one, run("cyclic", one));
    CHECK_GT(def_one, run("lru", one) + 0.05);
  }
}

TEST_CASE("forecast: a key that went quiet is told from one never used, by how long ago it was used") {
  // One layer, 64 experts, top-1: base rate 1/64, smoothing weight 2. Visit 0 routes expert 1,
  // visits 1-40 expert 2; expert 3 is never used.
  CacheGeometry g = CacheGeometry::dense(1, 64, 1);
  ForecastPolicy p(g, ForecastParams{});
  ExpertCache cache(g, 64, p);
  auto visit = [&](uint32_t expert) {
    uint32_t e[1] = {expert};
    cache.begin_layer(0, e);
    cache.unpin(cache.acquire({0, expert}).slot);
  };
  visit(1);
  for (int t = 1; t <= 40; ++t) visit(2);
  // From visit 32 on, expert 1 is in the class "not in the recent visits, one use in the older
  // ones, last use 32-63 visits ago", sampled by it alone at visits 33-40: 8 samples, none
  // routed to; its parent (any older count) has the same: (0 + 2/64) / 10.
  CHECK(p.use_probability({0, 1}) == doctest::Approx((2 * (2.0 / 64 / 10)) / 10));
  // Never used: 64 + 63 + 39 x 62 = 2545 samples, 2 routed to (visit 0, visit 1); the parent
  // has the same samples. Before the age buckets both keys shared this class.
  const double parent = (2 + 2.0 / 64) / 2547;
  CHECK(p.use_probability({0, 3}) == doctest::Approx((2 + 2 * parent) / 2547));
  // Used again: the age is forgotten (the use is in the recent bits).
  visit(1);
  CHECK(p.use_probability({0, 1}) != doctest::Approx(p.use_probability({0, 3})));
}
