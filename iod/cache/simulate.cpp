#include "iod/cache/simulate.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "iod/cache/expert_cache.h"
#include "shared/util/error.h"

namespace waste::cache {

const std::vector<double> kDefaultWorkingSets = {0.5, 1, 2, 4, 8};

CacheGeometry trace_geometry(const RoutingTrace& trace, uint32_t experts_per_layer) {
  uint32_t experts = experts_per_layer ? experts_per_layer : trace.max_expert + 1;
  require(trace.max_expert < experts, trace.source + ": expert id " + std::to_string(trace.max_expert) +
                                          " out of range for " + std::to_string(experts) + " experts per layer");
  return CacheGeometry::dense(trace.moe_layers, experts, trace.top_k);
}

SimResult simulate_policy(const RoutingTrace& trace, const CacheGeometry& geometry, uint32_t slots,
                          CachePolicy& policy, std::span<const ExpertKey> prewarm) {
  require(slots >= trace.top_k, "simulate: " + std::to_string(slots) + " slots cannot hold one layer's " +
                                    std::to_string(trace.top_k) + " experts");
  ExpertCache cache(geometry, slots, policy);
  for (const ExpertKey& k : prewarm) {
    if (cache.occupied() >= slots) break;
    cache.insert_guess(k, InsertKind::Prewarm);
  }
  SimResult r;
  std::vector<uint32_t> pinned;
  pinned.reserve(trace.top_k);
  for (size_t t = 0; t < trace.tokens(); ++t) {
    for (uint32_t l = 0; l < trace.moe_layers; ++l) {
      const uint32_t* ex = trace.layer_experts(t, l);
      uint32_t layer = geometry.moe_layers()[l];
      cache.begin_layer(layer, std::span<const uint32_t>(ex, trace.top_k));
      pinned.clear();
      for (uint32_t j = 0; j < trace.top_k; ++j) {
        Acquired a = cache.acquire(ExpertKey{layer, ex[j]});
        if (a.slot == kNoSlot) throw Error("simulate: no evictable slot (all pinned)");
        ++r.accesses;
        if (a.hit) ++r.hits;
        pinned.push_back(a.slot);
      }
      for (uint32_t s : pinned) cache.unpin(s);
    }
  }
  return r;
}

SimResult simulate_belady(const RoutingTrace& trace, const CacheGeometry& geometry, uint32_t slots, bool bypass,
                          std::span<const ExpertKey> initial) {
  require(slots >= trace.top_k, "simulate: " + std::to_string(slots) + " slots cannot hold one layer's experts");
  const size_t n = trace.experts.size();
  const uint32_t k = trace.top_k;
  std::vector<uint32_t> key(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t l = uint32_t((i / k) % trace.moe_layers);
    key[i] = geometry.key_index(ExpertKey{geometry.moe_layers()[l], trace.experts[i]});
  }
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> next_use(n);
  std::vector<uint64_t> first_use(geometry.key_count(), kNever);
  for (size_t i = n; i-- > 0;) {
    next_use[i] = first_use[key[i]];
    first_use[key[i]] = i;
  }
  // Cached keys ordered by next use (ties only among keys never used: the key breaks them).
  std::set<std::pair<uint64_t, uint32_t>> by_next;
  std::vector<uint64_t> cached_next(geometry.key_count(), 0);
  std::vector<bool> cached(geometry.key_count(), false);
  for (const ExpertKey& ik : initial) {
    if (by_next.size() >= slots) break;
    uint32_t kk = geometry.key_index(ik);
    if (cached[kk]) continue;
    cached[kk] = true;
    cached_next[kk] = first_use[kk];
    by_next.insert({first_use[kk], kk});
  }
  SimResult r;
  for (size_t i = 0; i < n; ++i) {
    uint32_t kk = key[i];
    ++r.accesses;
    if (cached[kk]) {
      ++r.hits;
      by_next.erase({cached_next[kk], kk});
      cached_next[kk] = next_use[i];
      by_next.insert({next_use[i], kk});
      continue;
    }
    if (by_next.size() >= slots) {
      size_t layer_start = i - i % k;  // accesses [layer_start, i) belong to the current layer
      auto it = std::prev(by_next.end());
      if (bypass) {
        if (next_use[i] >= it->first) continue;  // the new record is the one to drop
      } else {
        // The current layer's records are pinned: skip them (their next use is a later token,
        // so they may well be the furthest).
        for (;;) {
          bool in_layer = false;
          for (size_t j = layer_start; j < i; ++j) in_layer |= key[j] == it->second;
          if (!in_layer) break;
          if (it == by_next.begin()) throw Error("simulate: no evictable slot (all pinned)");
          --it;
        }
      }
      cached[it->second] = false;
      by_next.erase(it);
    }
    cached[kk] = true;
    cached_next[kk] = next_use[i];
    by_next.insert({next_use[i], kk});
  }
  return r;
}

// Slots of a sweep's row: `ws` working sets, at least one layer's top_k (what a fetch pins).
static uint32_t sweep_slots(const RoutingTrace& trace, const CacheGeometry& g, double ws) {
  require(ws > 0 && ws <= 1e6, "simulate: working-set multiple must be positive");
  return uint32_t(std::max<double>(trace.top_k, std::llround(ws * g.working_set_slots())));
}

std::vector<SweepRow> sweep(const RoutingTrace& trace, const std::string& policy_spec,
                            std::span<const double> working_sets, const KeyPrior& prior,
                            std::span<const ExpertKey> prewarm, uint32_t experts_per_layer) {
  // A sweep is the comparison of one policy.
  std::vector<SweepRow> rows;
  for (const CompareRow& c : compare_policies(trace, {policy_spec}, working_sets, prior, prewarm, experts_per_layer))
    rows.push_back({c.working_sets, c.slots, c.hit_rate.at(0), c.optimal_hit_rate, c.optimal_no_bypass_hit_rate});
  return rows;
}

std::vector<CompareRow> compare_policies(const RoutingTrace& trace, const std::vector<std::string>& policy_specs,
                                         std::span<const double> working_sets, const KeyPrior& prior,
                                         std::span<const ExpertKey> prewarm, uint32_t experts_per_layer) {
  CacheGeometry g = trace_geometry(trace, experts_per_layer);
  std::vector<CompareRow> rows;
  for (double ws : working_sets) {
    CompareRow row;
    row.working_sets = ws;
    row.slots = sweep_slots(trace, g, ws);
    for (const std::string& spec : policy_specs) {
      auto policy = make_policy(spec, g, prior);
      row.hit_rate.push_back(simulate_policy(trace, g, row.slots, *policy, prewarm).hit_rate());
    }
    row.optimal_hit_rate = simulate_belady(trace, g, row.slots, true, prewarm).hit_rate();
    row.optimal_no_bypass_hit_rate = simulate_belady(trace, g, row.slots, false, prewarm).hit_rate();
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::string> comparison_policies() {
  std::vector<std::string> out{kDefaultPolicy};
  for (const std::string& b : baseline_policy_names()) out.push_back(b);
  return out;
}

std::string comparison_table(const std::vector<std::string>& specs, const std::vector<CompareRow>& rows) {
  std::string out = "| WS | slots |";
  std::string rule = "|---|---|";
  for (const std::string& s : specs) {
    out += " " + s + " |";
    rule += "---|";
  }
  out += " optimal | no bypass |";
  rule += "---|---|";
  if (specs.size() > 1) {
    out += " " + specs[0] + " - best other (points) |";
    rule += "---|";
  }
  out += "\n" + rule + "\n";
  char buf[96];
  for (const CompareRow& r : rows) {
    std::snprintf(buf, sizeof buf, "| %g | %u |", r.working_sets, r.slots);
    out += buf;
    for (double h : r.hit_rate) {
      std::snprintf(buf, sizeof buf, " %.2f%% |", 100 * h);
      out += buf;
    }
    std::snprintf(buf, sizeof buf, " %.2f%% | %.2f%% |", 100 * r.optimal_hit_rate, 100 * r.optimal_no_bypass_hit_rate);
    out += buf;
    if (specs.size() > 1) {
      size_t best = 1;
      for (size_t i = 2; i < r.hit_rate.size(); ++i)
        if (r.hit_rate[i] > r.hit_rate[best]) best = i;
      std::snprintf(buf, sizeof buf, " %+.2f (%s) |", 100 * (r.hit_rate[0] - r.hit_rate[best]), specs[best].c_str());
      out += buf;
    }
    out += "\n";
  }
  return out;
}

}  // namespace waste::cache
