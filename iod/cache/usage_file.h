// The learned hotlist: how often each (layer, expert) was routed to, persisted in the
// container's `usage` file so iod can pre-warm the cache with the most popular records at start
// and give the frequency policy a prior before it has seen any token.
//
// Format (version 1, little-endian, at most ~8 MiB):
//   offset 0   u32  magic 0x53555857 ("WXUS")
//          4   u16  version (1)
//          6   u16  reserved, 0
//          8   u64  container_id of the container the counts belong to (0 = unknown)
//         16   u64  tokens: decode steps counted
//         24   u32  n_layers  (1..4096)   MoE layers, decoder numbering
//         28   u32  experts   (1..65536)  experts per layer; n_layers * experts <= 2^21
//         32   u32  layers[n_layers]      strictly increasing decoder layer numbers
//              u32  counts[n_layers][experts]
//              u64  xxh3-64 of every preceding byte
// Counts and tokens are halved together when a count would pass 2^31 (ageing keeps the ratio
// count/tokens, the per-token popularity, and lets old habits fade).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "iod/cache/geometry.h"
#include "iod/cache/policy.h"
#include "iod/cache/routing_trace.h"

namespace waste::cache {

constexpr uint32_t kUsageMagic = 0x53555857;
constexpr uint16_t kUsageVersion = 1;
constexpr const char* kUsageFileName = "usage";

struct UsageCounts {
  uint64_t container_id = 0;
  uint64_t tokens = 0;
  std::vector<uint32_t> layers;
  uint32_t experts = 0;
  std::vector<uint32_t> counts;  // layers.size() * experts

  static UsageCounts for_geometry(const CacheGeometry& g, uint64_t container_id = 0);
  bool matches(const CacheGeometry& g) const;
  // One routed read of the key (key.layer is a decoder layer listed in `layers`).
  void add(ExpertKey key);
  void end_token();
  // Per-key popularity count/tokens in the geometry's key order (empty when tokens == 0).
  KeyPrior prior(const CacheGeometry& g) const;
  // Keys by descending count (ties: lower layer, then lower expert), zero counts left out.
  std::vector<ExpertKey> hottest(size_t n) const;
};

std::vector<uint8_t> encode_usage(const UsageCounts& u);
UsageCounts decode_usage(std::span<const uint8_t> bytes, const std::string& source);
UsageCounts read_usage_file(const std::string& path);
void write_usage_file(const std::string& path, const UsageCounts& u);  // atomic replace

UsageCounts usage_from_trace(const RoutingTrace& trace, const CacheGeometry& g);

}  // namespace waste::cache
