// How many slots the cache gets. Until the shared memory planner (shared/plan) lands, iod sizes
// only its own cache: an explicit byte budget, or "auto" = the largest whole number of token
// working sets (3, 2, 1) that stays under 7/8 of the RAM left to this process; the floor is one
// layer's experts in flight (top_k slots), and a budget under it is refused with the breakdown.
#pragma once
#include <cstdint>
#include <string>

#include "iod/cache/geometry.h"

namespace waste::iod {

struct CacheBudget {
  uint32_t slots = 0;
  uint64_t bytes = 0;
  std::string breakdown;  // one line: slots, slot size, working sets
};

CacheBudget plan_cache(const std::string& budget, uint32_t slots_override, const cache::CacheGeometry& g,
                       uint64_t slot_bytes);
uint64_t usable_ram_bytes();  // min(physical RAM, cgroup v2 memory.max / v1 limit of this process)

}  // namespace waste::iod
