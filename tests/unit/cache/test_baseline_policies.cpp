// The classic baselines forecast is measured against (arc, s3fifo, lfu, lfru): each one's rules
// on short hand-made sequences, victims and hits worked out by hand from the algorithm.
#include <doctest/doctest.h>

#include <vector>

#include "iod/cache/arc_policy.h"
#include "iod/cache/expert_cache.h"
#include "iod/cache/lfru_policy.h"
#include "iod/cache/lfu_policy.h"
#include "iod/cache/s3fifo_policy.h"
#include "shared/util/error.h"

using namespace waste::cache;

namespace {

// One MoE layer, top-1: each access is one layer visit for one expert; records the victims.
struct Driver {
  CacheGeometry g = CacheGeometry::dense(1, 256, 1);
  ExpertCache cache;
  uint64_t hits = 0;
  Driver(CachePolicy& p, uint32_t slots) : cache(g, slots, p) {}
  // The evicted expert, or -1 when the access hit or took a free slot.
  int access(uint32_t expert) {
    uint32_t e[1] = {expert};
    cache.begin_layer(0, e);
    Acquired a = cache.acquire({0, expert});
    REQUIRE(a.slot != kNoSlot);
    cache.unpin(a.slot);
    hits += a.hit;
    return a.evicted ? int(a.victim.expert) : -1;
  }
  std::vector<int> run(const std::vector<uint32_t>& seq) {
    std::vector<int> out;
    for (uint32_t e : seq) out.push_back(access(e));
    return out;
  }
};

}  // namespace

TEST_CASE("arc: ghost hits move p, REPLACE follows it (c = 2, worked by hand)") {
  CacheGeometry g = CacheGeometry::dense(1, 256, 1);
  ArcPolicy arc(g);
  Driver d(arc, 2);
  // 1, 2 fill T1; 1 hits -> T2 = [1], T1 = [2].
  CHECK_EQ(d.run({1, 2, 1}), std::vector<int>{-1, -1, -1});
  CHECK_EQ(arc.t1_size(), 1u);
  CHECK_EQ(arc.t2_size(), 1u);
  // 3: case IV, |T1| + |B1| = 1 < c; REPLACE: |T1| = 1 > p = 0: T1's LRU (2) goes to B1.
  CHECK_EQ(d.access(3), 2);
  CHECK(arc.in_b1({0, 2}));
  // 2: a B1 hit: p = 0 + max(1, |B2|/|B1| = 0) = 1; REPLACE: |T1| = 1 is not > p and the key
  // was not in B2: T2's LRU (1) goes to B2; 2 enters T2.
  CHECK_EQ(d.access(2), 1);
  CHECK(arc.target_t1() == doctest::Approx(1.0));
  CHECK(arc.in_b2({0, 1}));
  CHECK_FALSE(arc.in_b1({0, 2}));
  // 1: a B2 hit: p = max(0, 1 - max(1, |B1|/|B2| = 0)) = 0; REPLACE: |T1| = 1 > 0: T1's LRU (3)
  // goes to B1; 1 enters T2 (T2 = [1, 2]).
  CHECK_EQ(d.access(1), 3);
  CHECK(arc.target_t1() == doctest::Approx(0.0));
  CHECK(arc.in_b1({0, 3}));
  CHECK_EQ(arc.t2_size(), 2u);
  // 4: case IV, |T1| + |B1| = 1 < c, 3 < 2c in all; REPLACE: T1 is empty: T2's LRU (2) -> B2.
  CHECK_EQ(d.access(4), 2);
  // 5: case IV with |T1| + |B1| = 2 = c and |T1| = 1 < c: B1's LRU (3) is dropped, then
  // REPLACE: |T1| = 1 > p = 0: T1's LRU (4) -> B1. LRU would have evicted 1 here.
  CHECK_EQ(d.access(5), 4);
  CHECK_FALSE(arc.in_b1({0, 3}));
  CHECK(arc.in_b1({0, 4}));
  CHECK(arc.in_b2({0, 2}));
  CHECK_EQ(d.hits, 1u);
  CHECK_EQ(arc.b1_size() + arc.b2_size(), 2u);
}

TEST_CASE("arc: with T1 = c and B1 empty, T1's LRU record goes without a ghost") {
  CacheGeometry g = CacheGeometry::dense(1, 256, 1);
  ArcPolicy arc(g);
  Driver d(arc, 2);
  CHECK_EQ(d.run({1, 2, 3}), std::vector<int>{-1, -1, 1});
  CHECK_FALSE(arc.in_b1({0, 1}));
  CHECK_FALSE(arc.in_b2({0, 1}));
  CHECK_EQ(arc.b1_size() + arc.b2_size(), 0u);
  // Its directory stays within 2c on a long scan.
  for (uint32_t e = 10; e < 200; ++e) d.access(e);
  CHECK_LE(arc.t1_size() + arc.t2_size() + arc.b1_size() + arc.b2_size(), 4u);
}

TEST_CASE("s3fifo: S promotes what was hit, ghosts what was not, M reinserts by frequency") {
  CacheGeometry g = CacheGeometry::dense(1, 256, 1);
  S3FifoPolicy s3(g);
  Driver d(s3, 4);
  CHECK_EQ(s3.small_capacity(), 1u);  // 10% of 4 rounds to 0: at least 1
  CHECK_EQ(s3.main_capacity(), 3u);
  // 1-4 fill the cache through S (S = [4, 3, 2, 1], oldest last); 1 and 2 are hit once.
  CHECK_EQ(d.run({1, 2, 3, 4, 1, 2}), std::vector<int>(6, -1));
  // 5: M holds 0 <= 3, S is not empty: from S. 1 was hit -> M, 2 was hit -> M, 3 was not:
  // evicted into G.
  CHECK_EQ(d.access(5), 3);
  CHECK(s3.in_ghost({0, 3}));
  CHECK_EQ(s3.main_size(), 2u);
  CHECK_EQ(s3.small_size(), 2u);  // 5, 4
  // 3 again: in G, so it enters M; the room comes from S, whose oldest (4) was never hit.
  CHECK_EQ(d.access(3), 4);
  CHECK_FALSE(s3.in_ghost({0, 3}));
  CHECK_EQ(s3.main_size(), 3u);  // 3, 2, 1
  CHECK_EQ(d.access(6), 5);      // S = [5]: never hit, out
  CHECK_EQ(d.access(1), -1);     // hit: 1's frequency 1
  CHECK_EQ(d.access(7), 6);
  // 4 again: taken out of G at the miss (G = 6, 5 then), enters M; S's 7 goes to G.
  CHECK_EQ(d.access(4), 7);
  CHECK_EQ(s3.main_size(), 4u);  // over its 3: the next eviction is from M
  // 8: M's oldest is 1, frequency 1: reinserted at M's head with 0; next oldest 2 (its
  // frequency was cleared when it moved to M): evicted, and not into G (it left M).
  CHECK_EQ(d.access(8), 2);
  CHECK_FALSE(s3.in_ghost({0, 2}));
  for (uint32_t e : {5u, 6u, 7u}) CHECK(s3.in_ghost({0, e}));
  CHECK_EQ(d.hits, 3u);
}

TEST_CASE("lfu: counts survive eviction, ties go to the least recently used") {
  CacheGeometry g = CacheGeometry::dense(1, 256, 1);
  LfuPolicy lfu(g);
  Driver d(lfu, 2);
  // 1 (count 2), 2 (1); 3 evicts 2, the lowest count.
  CHECK_EQ(d.run({1, 1, 2, 3}), std::vector<int>{-1, -1, -1, 2});
  // 2 comes back with count 1 + 1 = 2: it does not start over. Cached: 1 (2), 3 (1): 3 goes.
  // (LRU would evict 1, used longest ago.)
  CHECK_EQ(d.access(2), 3);
  CHECK_EQ(lfu.count({0, 2}), 2u);
  // 3: count 2; cached 1 and 2 both at 2: 1, accessed longer ago, goes.
  CHECK_EQ(d.access(3), 1);
  // 1: count 3; cached 2 (2, older) and 3 (2): 2 goes.
  CHECK_EQ(d.access(1), 2);
  CHECK_EQ(lfu.count({0, 1}), 3u);
  CHECK_EQ(d.hits, 1u);
}

TEST_CASE("lfru (all slots): in-cache hits first, recency second, the count restarts after eviction") {
  LfruPolicy lfru(0);
  Driver d(lfru, 3);
  // 1 hits once (hits 2), 2 and 3 have 1 each, 2 the older: 4 evicts 2.
  CHECK_EQ(d.run({1, 1, 2, 3, 4}), std::vector<int>{-1, -1, -1, -1, 2});
  // 2 comes back with hits = 1 (the C engine's ec_claim resets it): 1 (2), 3 (1, older), 4 (1):
  // 3 goes.
  CHECK_EQ(d.access(2), 3);
  const uint32_t slot2 = d.cache.find({0, 2});
  CHECK_EQ(lfru.hits(slot2), 1u);
  CHECK_EQ(lfru.last(slot2), 6u);  // the clock counts demand lookups
  // 2 hits twice (hits 3); 5: 1 (2), 4 (1), 2 (3): 4 goes.
  CHECK_EQ(d.run({2, 2, 5}), std::vector<int>{-1, -1, 4});
  CHECK_EQ(d.hits, 3u);
}

TEST_CASE("lfru (the engine's 16-slot sample): the victim is the best of the drawn slots") {
  // 64 slots, keys 0..63 read in order into slots 0..63 (hits 1, last = key + 1). The engine's
  // LCG from 0x9e3779b9 draws slots 4 19 22 61 56 55 42 1 44 27 62 5 32 63 18 9 first: the
  // oldest of those is slot 1, where scanning every slot would evict slot 0.
  LfruPolicy sampled;  // kEngineSample
  LfruPolicy exact(0);
  Driver ds(sampled, 64), de(exact, 64);
  for (uint32_t e = 0; e < 64; ++e) {
    ds.access(e);
    de.access(e);
  }
  CHECK_EQ(ds.access(100), 1);
  CHECK_EQ(de.access(100), 0);
  // The next draws: 20 35 38 13 8 7 58 17 60 43 14 21 48 15 34 25: the oldest is slot 7.
  CHECK_EQ(ds.access(101), 7);
  CHECK_EQ(de.access(101), 1);
}

TEST_CASE("baseline specs: parameters checked, unknown names rejected") {
  CacheGeometry g = CacheGeometry::dense(2, 8, 2);
  for (const std::string& name : baseline_policy_names()) CHECK_EQ(make_policy(name, g)->name(), name);
  CHECK_EQ(make_policy("s3fifo:small=0.2", g)->name(), "s3fifo");
  CHECK_EQ(make_policy("lfru:sample=0", g)->name(), "lfru");
  CHECK_THROWS_AS(make_policy("arc:p=1", g), waste::Error);
  CHECK_THROWS_AS(make_policy("lfu:x=1", g), waste::Error);
  CHECK_THROWS_AS(make_policy("s3fifo:small=1.5", g), waste::Error);
  CHECK_THROWS_AS(make_policy("lfru:sample=2.5", g), waste::Error);
  CHECK_THROWS_AS(make_policy("s3-fifo", g), waste::Error);
  CHECK_THROWS_AS(make_policy("all", g), waste::Error);
}
