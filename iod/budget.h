// How many slots iod's segment gets: `--slots N` exactly (tests, benchmarks), else the shared
// memory planner (shared/plan) on the container: `--budget auto` = the planner's default (the
// largest whole number of token working sets, up to 3, under 7/8 of usable RAM), an explicit
// total budget is split by the planner and refused under the floor with the breakdown.
#pragma once
#include <cstdint>
#include <string>

#include "shared/container/reader.h"
#include "shared/image/image_budget.h"
#include "shared/util/option_limits.h"
#include "shared/util/thread_pool.h"

namespace waste::iod {

struct CacheBudget {
  uint32_t slots = 0;
  std::string breakdown;  // for the log
  std::string warning;    // for the log when not empty: --slots that exceed usable RAM
};

// What compute will hold, which the planner's floor counts: its context and sessions, its
// prompt-cache bytes (or "auto") and the most patches one image may take.
struct ComputeShape {
  uint64_t context = uint64_t(limits::kDefaultContextTokens);
  uint32_t sessions = uint32_t(limits::kDefaultLiveSessions);
  bool http_front_end = false;  // waste-serve runs beside compute (plan::PlanRequest::http_front_end)
  std::string prompt_cache = "auto";
  uint64_t image_patches = kDefaultImagePatches;
  uint32_t threads = ThreadPool::global_size();  // compute's --threads (plan::PlanRequest::threads)
};

// The same plan as `waste plan` for the same container and shape (plan::plan_request_of).
CacheBudget plan_cache(const Container& c, const std::string& budget, uint32_t slots_override, uint64_t slot_bytes,
                       uint32_t top_k, uint32_t key_count, const ComputeShape& compute = {});

}  // namespace waste::iod
