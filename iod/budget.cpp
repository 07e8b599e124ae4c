#include "iod/budget.h"

#include <algorithm>
#include <cstdio>

#include "shared/plan/container_plan.h"
#include "shared/plan/memory_plan.h"
#include "shared/platform/memory.h"
#include "shared/util/error.h"

namespace waste::iod {

CacheBudget plan_cache(const Container& c, const std::string& budget, uint32_t slots_override, uint64_t slot_bytes,
                       uint32_t top_k, uint32_t key_count, const ComputeShape& compute) {
  CacheBudget b;
  char line[640];
  // The planner's inputs as `waste plan` reads them: the embedding table stays on disk, the
  // vision tower is its own line.
  plan::PlanRequest req = plan::plan_request_of(c, compute.image_patches);
  require(slot_bytes >= req.record_stride, "iod: slot of " + std::to_string(slot_bytes) + " B under the largest record");
  req.record_stride = slot_bytes;
  req.context = compute.context;
  req.sessions = compute.sessions;
  req.threads = compute.threads;
  req.http_front_end = compute.http_front_end;
  if (compute.prompt_cache != "auto") req.prompt_cache = plan::parse_size(compute.prompt_cache);
  if (slots_override > 0) {
    // Two ways to size the cache: one is refused rather than one silently dropped.
    require_request(budget == "auto",
                    "iod: --slots and --budget both given: --slots sets the cache exactly, --budget lets the planner "
                    "size it; give one",
                    "--slots");
    require(slots_override >= top_k, "iod: --slots " + std::to_string(slots_override) + " is under the floor of " +
                                         std::to_string(top_k) + " (one MoE layer's experts in flight)");
    b.slots = std::min(slots_override, key_count);
    // The compute shape still counts: the planner's floor (whose experts in flight are the
    // first top_k of these slots) says what the instance holds with this cache.
    const plan::MemoryPlan p = plan::make_plan(req, platform::usable_memory());
    const uint64_t total = p.floor - p.experts_in_flight + uint64_t(b.slots) * slot_bytes;
    std::snprintf(line, sizeof line,
                  "%u slots x %s = %s (--slots); with the planner's floor for context %llu x %u sessions the "
                  "instance holds %s of %s usable RAM (%s)",
                  b.slots, plan::format_bytes(slot_bytes).c_str(), plan::format_bytes(uint64_t(b.slots) * slot_bytes).c_str(),
                  (unsigned long long)p.context, p.sessions, plan::format_bytes(total).c_str(),
                  plan::format_bytes(p.memory.usable).c_str(), p.memory.source.c_str());
    b.breakdown = line;
    if (total > p.memory.usable)
      b.warning = "iod: --slots " + std::to_string(b.slots) + " puts the instance at " + plan::format_bytes(total) +
                  ", over the " + plan::format_bytes(p.memory.usable) + " of usable RAM (" + p.memory.source +
                  "): the system will page or kill it";
    return b;
  }
  if (budget != "auto") req.budget = plan::parse_size(budget);
  plan::MemoryPlan p = plan::make_plan(req, platform::usable_memory());  // refuses a budget under the floor
  // More slots than records would be memory for nothing.
  b.slots = uint32_t(std::min<uint64_t>(p.slots, key_count));
  std::snprintf(line, sizeof line,
                "%u slots x %s = %s (planner, context %llu x %u sessions: floor %s = trunk %s + sessions %s + scratch %s + in flight %s + prompt cache %s"
                " + vision %s; cache %.2f working sets; usable RAM %s from %s)",
                b.slots, plan::format_bytes(slot_bytes).c_str(), plan::format_bytes(uint64_t(b.slots) * slot_bytes).c_str(),
                (unsigned long long)p.context, p.sessions, plan::format_bytes(p.floor).c_str(), plan::format_bytes(p.trunk).c_str(),
                plan::format_bytes(p.session_state).c_str(), plan::format_bytes(p.scratch).c_str(),
                plan::format_bytes(p.experts_in_flight).c_str(), plan::format_bytes(p.prompt_cache).c_str(),
                plan::format_bytes(p.vision).c_str(), p.cache_working_sets,
                plan::format_bytes(p.memory.usable).c_str(), p.memory.source.c_str());
  b.breakdown = line;
  require(b.slots >= top_k, "iod: the planner left " + std::to_string(b.slots) + " slots, under top_k " +
                                std::to_string(top_k) + ": " + b.breakdown);
  return b;
}

}  // namespace waste::iod
