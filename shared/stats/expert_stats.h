// The counters of an expert source (stat.h): records found in its cache, records it had to
// read, and the lookahead's prefetches: read on a hint, later asked for (used), evicted unasked
// (wasted). iod counts them for all its clients (store_stats.h), compute for its own traffic
// (engine_stats.h), both under these names.
#pragma once
#include <cstdint>

#include "shared/stats/stat.h"

#define WASTE_EXPERT_SOURCE_STATS(X, G)                                                                              \
  X(uint64_t, hits, "hits", "/hits", Counter, "lookups", "waste_expert_hits_total", 1,                                \
    "Expert lookups served from the cache.")                                                                          \
  X(uint64_t, misses, "misses", "/misses", Counter, "lookups", "waste_expert_misses_total", 1,                        \
    "Expert lookups that read the disk.")                                                                             \
  X(uint64_t, bytes_read, "bytesRead", "/bytes_read", Counter, "bytes", "waste_expert_read_gigabytes_total", 1e9,     \
    "Expert bytes read from disk, in GB.")                                                                            \
  X(uint64_t, prefetch_issued, "prefetchIssued", "/prefetch/issued", Counter, "records",                              \
    "waste_expert_prefetch_issued_total", 1, "Expert records read on a lookahead hint.")                              \
  X(uint64_t, prefetch_used, "prefetchUsed", "/prefetch/used", Counter, "records",                                    \
    "waste_expert_prefetch_used_total", 1, "Prefetched expert records a lookup then asked for.")                      \
  X(uint64_t, prefetch_wasted, "prefetchWasted", "/prefetch/wasted", Counter, "records",                              \
    "waste_expert_prefetch_wasted_total", 1, "Prefetched expert records evicted before any lookup asked for them.")

namespace waste::stats {

struct ExpertSourceStats {
  WASTE_STATS(WASTE_EXPERT_SOURCE_STATS)
};

}  // namespace waste::stats
