// What iod reports of its expert cache (ExpertStore.stats, docs/PROTOCOL.md); a list of stat.h.
// Its expert counters are the expert source's (expert_stats.h): what compute reads back from
// iod as its own (IodExperts::stats).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shared/stats/expert_stats.h"
#include "shared/stats/stat.h"

#define WASTE_STORE_STATS(X, G)                                                                                      \
  X(uint32_t, slot_count, "slotCount", "/slot_count", Gauge, "slots", "", 1, "Slots of the shared-memory segment.")   \
  X(uint32_t, slots_occupied, "slotsOccupied", "/slots_occupied", Gauge, "slots", "", 1, "Slots holding a record.")   \
  WASTE_EXPERT_SOURCE_STATS(X, G)                                                                                     \
  X(uint64_t, joined, "joined", "/joined", Counter, "lookups", "", 1, "Of the hits: joined a read still in flight.")  \
  X(uint64_t, failures, "failures", "/failures", Counter, "reads", "", 1,                                             \
    "Reads that failed (short read, EIO, bad header, checksum).")                                                     \
  X(double, read_seconds, "readSeconds", "/read_seconds", Counter, "seconds", "", 1,                                  \
    "Wall time during which at least one read was in flight.")                                                        \
  X(double, gb_per_s, "gbPerSecond", "/gb_per_s", Gauge, "GB/s", "", 1, "bytes_read / read_seconds / 1e9.")          \
  X(double, p50_us, "latencyP50Us", "/latency_us/p50", Gauge, "microseconds", "", 1, "Read latency, median.")         \
  X(double, p90_us, "latencyP90Us", "/latency_us/p90", Gauge, "microseconds", "", 1, "Read latency, 90th percentile.") \
  X(double, p99_us, "latencyP99Us", "/latency_us/p99", Gauge, "microseconds", "", 1, "Read latency, 99th percentile.") \
  X(double, max_us, "latencyMaxUs", "/latency_us/max", Gauge, "microseconds", "", 1, "Read latency, the longest.")    \
  X(uint32_t, queue_depth, "queueDepth", "/queue_depth", Gauge, "reads", "", 1, "Reads in flight at most (configured).") \
  X(uint32_t, in_flight, "inFlight", "/in_flight", Gauge, "reads", "", 1, "Reads submitted or queued now.")           \
  X(uint32_t, connections, "connections", "/connections", Gauge, "connections", "", 1, "Clients connected.")          \
  X(uint32_t, quarantined_slots, "quarantinedSlots", "/quarantined_slots", Gauge, "slots", "", 1,                     \
    "Slots of reads a dead io_uring abandoned: never used again until restart.")                                      \
  X(double, cpu_seconds, "cpuSeconds", "/cpu_seconds", Counter, "seconds", "", 1,                                     \
    "iod's process CPU time so far, user + system.")                                                                  \
  X(uint64_t, prewarmed, "prewarmed", "/prewarmed", Counter, "records", "", 1,                                        \
    "Records read at start because the usage file ranks them hottest.")

// One MoE layer's share of the lookups above (LayerStats beside the layer's number).
#define WASTE_LAYER_STATS(X, G)                                                                                      \
  X(uint64_t, hits, "hits", "/hits", Counter, "lookups", "", 1, "This layer's expert lookups served from the cache.") \
  X(uint64_t, misses, "misses", "/misses", Counter, "lookups", "", 1, "This layer's expert lookups that read the disk.")

namespace waste::stats {

struct LayerCounters {
  WASTE_STATS(WASTE_LAYER_STATS)
};

struct StoreStats {
  std::string io_path;  // "io_uring" or "pread", and why when it fell back
  std::string policy;   // the cache policy's name
  WASTE_STATS(WASTE_STORE_STATS)
  std::vector<std::pair<uint32_t, LayerCounters>> layers;  // decoder layer, counters
};

}  // namespace waste::stats
