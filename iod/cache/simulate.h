// Offline replay of a routing trace through a cache of N slots, no I/O: a policy (through
// ExpertCache, exactly as iod drives it) or Belady's offline optimum. Access order within a
// token: layer by layer, each layer's experts as listed; a layer's experts stay pinned until
// the layer is done (as compute's fetch pins them), so the cache needs slots >= top_k.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "iod/cache/geometry.h"
#include "iod/cache/policy.h"
#include "iod/cache/routing_trace.h"

namespace waste::cache {

struct SimResult {
  uint64_t accesses = 0, hits = 0;
  double hit_rate() const { return accesses ? double(hits) / double(accesses) : 0.0; }
};

// Dense layer numbering 0..L-1; experts per layer = the given count, or max id + 1 when 0.
CacheGeometry trace_geometry(const RoutingTrace& trace, uint32_t experts_per_layer = 0);

// Replays the trace. `prewarm` keys are inserted (InsertKind::Prewarm) before the first token,
// hottest first, until the cache is full.
SimResult simulate_policy(const RoutingTrace& trace, const CacheGeometry& geometry, uint32_t slots,
                          CachePolicy& policy, std::span<const ExpertKey> prewarm = {});

// Belady: on a miss with the cache full, evict the record whose next use is furthest (never
// used again first). With bypass, a missed record whose own next use is furthest is not kept
// (the classic optimum with the option not to cache); without bypass the current layer's
// records are pinned and the missed record always takes a slot, like the policies. `initial`
// keys start cached (in order, until full), so a pre-warmed policy is compared with an optimum
// that starts from the same content.
SimResult simulate_belady(const RoutingTrace& trace, const CacheGeometry& geometry, uint32_t slots, bool bypass = true,
                          std::span<const ExpertKey> initial = {});

// The sweep `waste iobench --simulate` prints: slots = round(working_sets x working-set slots).
struct SweepRow {
  double working_sets = 0;
  uint32_t slots = 0;
  double hit_rate = 0, optimal_hit_rate = 0;
  double optimal_no_bypass_hit_rate = 0;  // the optimum when every missed record takes a slot
};
std::vector<SweepRow> sweep(const RoutingTrace& trace, const std::string& policy_spec,
                            std::span<const double> working_sets, const KeyPrior& prior = {},
                            std::span<const ExpertKey> prewarm = {}, uint32_t experts_per_layer = 0);
extern const std::vector<double> kDefaultWorkingSets;  // 0.5, 1, 2, 4, 8

// Several policies on one trace, side by side: `waste iobench --simulate --policy all` and
// `waste-bench-cache-policy --policy all` (forecast against every classic baseline).
struct CompareRow {
  double working_sets = 0;
  uint32_t slots = 0;
  std::vector<double> hit_rate;  // per policy, in the order given
  double optimal_hit_rate = 0, optimal_no_bypass_hit_rate = 0;
};
std::vector<CompareRow> compare_policies(const RoutingTrace& trace, const std::vector<std::string>& policy_specs,
                                         std::span<const double> working_sets, const KeyPrior& prior = {},
                                         std::span<const ExpertKey> prewarm = {}, uint32_t experts_per_layer = 0);
// The default policy followed by baseline_policy_names(): what "--policy all" expands to.
std::vector<std::string> comparison_policies();
// A Markdown table, one row per size: hit rate per policy, the optimum (with bypass), and the
// first policy's margin in points over the best of the others (which is named).
std::string comparison_table(const std::vector<std::string>& policy_specs, const std::vector<CompareRow>& rows);

}  // namespace waste::cache
