// forecast's grouped victim choice against its definition, the scan over every slot.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>

#include "iod/cache/forecast_policy.h"
#include "iod/cache/simulate.h"
#include "iod/cache/slot_groups.h"
#include "tests/unit/cache/trace_helpers.h"

using namespace waste::cache;

TEST_CASE("slot groups hold each slot in one group and list exactly the non-empty groups") {
  SlotGroups g;
  g.reset(4, 6);
  g.assign(5, 2);
  g.assign(1, 2);
  g.assign(3, 0);
  auto sorted = [](std::span<const uint32_t> s) {
    std::vector<uint32_t> v(s.begin(), s.end());
    std::sort(v.begin(), v.end());
    return v;
  };
  auto listed = [&] { return sorted(g.nonempty()); };
  CHECK_EQ(sorted(g.members(2)), std::vector<uint32_t>{1, 5});
  CHECK_EQ(sorted(g.members(0)), std::vector<uint32_t>{3});
  CHECK_EQ(listed(), std::vector<uint32_t>{0, 2});
  g.assign(3, 2);  // group 0 empties
  CHECK_EQ(listed(), std::vector<uint32_t>{2});
  CHECK_EQ(g.group_of(3), 2u);
  g.assign(1, 1);  // removed from the middle of group 2
  CHECK_EQ(sorted(g.members(2)), std::vector<uint32_t>{3, 5});
  CHECK_EQ(listed(), std::vector<uint32_t>{1, 2});
  g.assign(1, SlotGroups::kNone);
  g.assign(3, SlotGroups::kNone);
  g.assign(5, SlotGroups::kNone);
  CHECK(listed().empty());
  CHECK_THROWS(g.assign(6, 0));
  CHECK_THROWS(g.assign(0, 4));
}

TEST_CASE("forecast's grouped victim choice equals the slot scan, with pins, prefetches and pre-warms") {
  // 3 MoE layers x 12 experts, top-3, 9 slots; skewed routing so classes differ; random
  // prefetches (some never used), pre-warms and extra pins. Every miss with a full cache asks
  // both choices.
  const uint32_t L = 3, E = 12, K = 3, slots = 9;
  CacheGeometry geo = CacheGeometry::dense(L, E, K);
  ForecastPolicy policy(geo, ForecastParams{});
  policy.reset(slots);
  std::mt19937 rng(7);
  std::map<uint32_t, uint32_t> slot_of;  // key index -> slot
  std::vector<int64_t> key_in(slots, -1);
  std::vector<bool> pinned(slots, false);
  auto key_index = [&](uint32_t layer, uint32_t e) { return layer * E + e; };
  int compared = 0, needed_now_or_none = 0;
  // Places the key (layer, e) in a slot: a free one, else the victim both choices agree on.
  auto place = [&](uint32_t layer, uint32_t e, InsertKind kind) -> bool {
    uint32_t s = uint32_t(std::find(key_in.begin(), key_in.end(), -1) - key_in.begin());
    if (s == slots) {
      auto evictable = [&](uint32_t x) { return key_in[x] >= 0 && !pinned[x]; };
      const uint32_t scan = policy.choose_victim_scan(evictable), grouped = policy.choose_victim(evictable);
      CHECK_EQ(grouped, scan);
      ++compared;
      if (grouped == kNoSlot) {
        ++needed_now_or_none;
        return false;
      }
      s = grouped;
      const uint32_t old = uint32_t(key_in[s]);
      policy.on_evict(s, ExpertKey{old / E, old % E});
      slot_of.erase(old);
    }
    key_in[s] = int64_t(key_index(layer, e));
    slot_of[key_index(layer, e)] = s;
    policy.on_insert(s, ExpertKey{layer, e}, kind);
    if (kind == InsertKind::Demand) pinned[s] = true;
    return true;
  };
  for (int token = 0; token < 400; ++token) {
    for (uint32_t layer = 0; layer < L; ++layer) {
      std::vector<uint32_t> experts;
      while (experts.size() < K) {
        // Experts 0-2 are hot, the rest uniform.
        uint32_t e = rng() % 3 == 0 ? rng() % 3 : rng() % E;
        if (std::find(experts.begin(), experts.end(), e) == experts.end()) experts.push_back(e);
      }
      policy.on_fetch(layer, experts);
      std::fill(pinned.begin(), pinned.end(), false);
      // Now and then a slot stays pinned by someone else for the layer.
      if (rng() % 4 == 0) pinned[rng() % slots] = true;
      for (uint32_t e : experts) {
        if (auto it = slot_of.find(key_index(layer, e)); it != slot_of.end()) {
          policy.on_hit(it->second, ExpertKey{layer, e});
          pinned[it->second] = true;
        } else {
          place(layer, e, InsertKind::Demand);
        }
      }
      // A guess about the next layer or a pre-warm of any key, not cached yet.
      if (rng() % 3 == 0) {
        const uint32_t gl = rng() % 2 ? (layer + 1) % L : rng() % L, ge = rng() % E;
        if (!slot_of.count(key_index(gl, ge)))
          place(gl, ge, rng() % 4 ? InsertKind::Prefetch : InsertKind::Prewarm);
      }
    }
  }
  CHECK_GT(compared, 1000);
  MESSAGE("compared " << compared << " victim choices, " << needed_now_or_none << " with no ordinary victim");
}

namespace {

// forecast with its victim chosen by the scan: the reference for whole-trace replays.
class ScanForecast final : public CachePolicy {
 public:
  explicit ScanForecast(const CacheGeometry& g) : inner_(g, ForecastParams{}) {}
  std::string name() const override { return "forecast-scan"; }
  void reset(uint32_t slots) override { inner_.reset(slots); }
  void on_fetch(uint32_t layer, std::span<const uint32_t> experts) override { inner_.on_fetch(layer, experts); }
  void on_hit(uint32_t slot, ExpertKey key) override { inner_.on_hit(slot, key); }
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override { inner_.on_insert(slot, key, kind); }
  void on_evict(uint32_t slot, ExpertKey key) override { inner_.on_evict(slot, key); }
  uint32_t choose_victim(const EvictableFn& evictable) override { return inner_.choose_victim_scan(evictable); }

 private:
  ForecastPolicy inner_;
};

}  // namespace

TEST_CASE("forecast's grouped victim choice replays the real traces exactly as the scan") {
  // Many groups share a score here (classes not sampled yet share their parent's estimate),
  // so this also checks that ties go to the lowest slot across groups.
  for (const char* name : {"olmoe-299.jsonl", "kimi-linear-300.jsonl"}) {
    RoutingTrace t = read_routing_trace(waste::cache::testing::shared_trace(name));
    if (std::string(name) == "kimi-linear-300.jsonl") t = t.slice(0, 100);  // keeps the test short
    CacheGeometry g = trace_geometry(t);
    for (double ws : {0.1, 0.5, 1.0, 3.0}) {
      CAPTURE(name);
      CAPTURE(ws);
      const uint32_t slots = std::max<uint32_t>(t.top_k, uint32_t(ws * g.working_set_slots()));
      ForecastPolicy grouped(g, ForecastParams{});
      ScanForecast scan(g);
      CHECK_EQ(simulate_policy(t, g, slots, grouped).hits, simulate_policy(t, g, slots, scan).hits);
    }
  }
}
