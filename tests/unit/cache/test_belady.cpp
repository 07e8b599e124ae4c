#include <doctest/doctest.h>

#include "iod/cache/simulate.h"
#include "tests/unit/cache/trace_helpers.h"

using namespace waste::cache;
using waste::cache::testing::make_trace;

TEST_CASE("Belady on a one-layer sequence, computed by hand") {
  // A B C A B D A, one expert per token, 2 slots.
  RoutingTrace t = make_trace({{{0}}, {{1}}, {{2}}, {{0}}, {{1}}, {{3}}, {{0}}});
  CacheGeometry g = trace_geometry(t);
  // With bypass C and D (never used again) are not kept: hits A, B, A.
  SimResult bypass = simulate_belady(t, g, 2, true);
  CHECK_EQ(bypass.accesses, 7);
  CHECK_EQ(bypass.hits, 3);
  // Without bypass C must take a slot: it evicts B (next use 4 after A's 3), so B misses once:
  // hits A (3), A (6).
  SimResult pinned = simulate_belady(t, g, 2, false);
  CHECK_EQ(pinned.hits, 2);
  // Enough slots for everything: only the 4 compulsory misses.
  CHECK_EQ(simulate_belady(t, g, 4, true).hits, 3);
}

TEST_CASE("Belady on two layers with top-2, computed by hand") {
  // Accesses (layer, expert): a=(0,0) b=(0,1) c=(1,0) d=(1,1) | a e=(0,2) d f=(1,2) | a b d f
  RoutingTrace t = make_trace({{{0, 1}, {0, 1}}, {{0, 2}, {1, 2}}, {{0, 1}, {1, 2}}});
  CacheGeometry g = trace_geometry(t);
  // 4 slots: after the first token {a,b,c,d}; e is never reused (dropped or evicted at once),
  // f evicts c (never reused). Hits: a, d, a, b, d, f.
  CHECK_EQ(simulate_belady(t, g, 4, true).hits, 6);
  CHECK_EQ(simulate_belady(t, g, 4, false).hits, 6);
  // 2 slots (half a working set), next uses in brackets: a[4] b[9]; c (never again) dropped;
  // d[6] evicts b[9]; a hits (a[8]); e dropped; d hits (d[10]); f[11] dropped as furthest; a hits;
  // b, f dropped; d hits. Hits: a, d, a, d = 4.
  CHECK_EQ(simulate_belady(t, g, 2, true).hits, 4);
}

TEST_CASE("Belady is an upper bound for every policy on a real trace") {
  RoutingTrace t = read_routing_trace(waste::cache::testing::shared_trace("olmoe-299.jsonl"));
  CacheGeometry g = trace_geometry(t);
  for (const std::string& p : policy_names()) {
    for (uint32_t slots : {64u, 256u}) {
      auto policy = make_policy(p, g);
      double h = simulate_policy(t, g, slots, *policy).hit_rate();
      CHECK_LE(h, simulate_belady(t, g, slots, false).hit_rate() + 1e-12);
      CHECK_LE(simulate_belady(t, g, slots, false).hit_rate(), simulate_belady(t, g, slots, true).hit_rate() + 1e-12);
    }
  }
}

TEST_CASE("Belady from a pre-warmed start, computed by hand") {
  // A B C A B D A, 2 slots, starting with A and B cached: with bypass C and D are dropped and
  // every A and B hits: 5 hits. Without bypass C evicts B (next use 4, after A's 3); B misses at
  // 4 and evicts C (never used again); D evicts B; A hits throughout: hits A, B, A, A = 4.
  RoutingTrace t = make_trace({{{0}}, {{1}}, {{2}}, {{0}}, {{1}}, {{3}}, {{0}}});
  CacheGeometry g = trace_geometry(t);
  std::vector<ExpertKey> warm = {{0, 0}, {0, 1}, {0, 2}};  // the third does not fit
  CHECK_EQ(simulate_belady(t, g, 2, true, warm).hits, 5);
  CHECK_EQ(simulate_belady(t, g, 2, false, warm).hits, 4);
}

TEST_CASE("the --simulate sweep: slots per working set, the policy's and the optimum's hit rates") {
  RoutingTrace t = read_routing_trace(waste::cache::testing::shared_trace("olmoe-299.jsonl"));
  CacheGeometry g = trace_geometry(t);
  std::vector<double> ws = {0.5, 1};
  std::vector<SweepRow> rows = sweep(t, kDefaultPolicy, ws);
  REQUIRE_EQ(rows.size(), 2u);
  CHECK_EQ(rows[0].slots, 64u);  // 0.5 x 16 layers x top-8
  CHECK_EQ(rows[1].slots, 128u);
  for (const SweepRow& r : rows) {
    auto p = make_policy(kDefaultPolicy, g);
    CHECK_EQ(r.hit_rate, simulate_policy(t, g, r.slots, *p).hit_rate());
    CHECK_EQ(r.optimal_hit_rate, simulate_belady(t, g, r.slots, true).hit_rate());
    CHECK_EQ(r.optimal_no_bypass_hit_rate, simulate_belady(t, g, r.slots, false).hit_rate());
    CHECK_LE(r.optimal_no_bypass_hit_rate, r.optimal_hit_rate);
    CHECK_LE(r.hit_rate, r.optimal_no_bypass_hit_rate);
  }
}
