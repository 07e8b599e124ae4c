// "lfru": the C engine's expert-cache policy (waste-c d9b919a, src/ecache.c: ec_victim,
// ec_claim / ec_claim_spec and waste_ecache_get; "frequency first, recency as tiebreak, victims
// chosen from a small random sample", src/ecache.h), a baseline for the default policy.
//
//   Per slot: hits and last. A clock advances by 1 on every demand lookup (waste_ecache_get).
//   A demand miss claims its slot with hits = 1, last = clock (ec_claim); a speculative read
//   likewise, without advancing the clock (ec_claim_spec); a hit adds 1 to hits and sets
//   last = clock. The count is the record's in-cache count: it restarts at 1 when the key is
//   read again after an eviction.
//   Victim (ec_victim): EC_SAMPLE = 16 slots drawn with the engine's LCG
//   (rng = rng * 1664525 + 1013904223, slot = rng % slots, seeded 0x9e3779b9 at init); pinned
//   ones are skipped; the lowest hits wins, ties to the lowest last (the first drawn on a full
//   tie). When every drawn slot is pinned, the first evictable slot in slot order.
//
// sample=0 scans every slot instead (the exact LFRU order the sample approximates; ties to the
// lowest slot). The C engine's pre-warm (waste_ecache_warm: hits from its usage file) has no
// counterpart here: a pre-warmed record starts like a speculative read.
#pragma once
#include <cstdint>
#include <vector>

#include "iod/cache/policy.h"

namespace waste::cache {

class LfruPolicy final : public CachePolicy {
 public:
  static constexpr uint32_t kEngineSample = 16;  // EC_SAMPLE
  static constexpr uint32_t kEngineSeed = 0x9e3779b9u;
  explicit LfruPolicy(uint32_t sample = kEngineSample) : sample_(sample) {}
  std::string name() const override { return "lfru"; }
  void reset(uint32_t slots) override;
  void on_hit(uint32_t slot, ExpertKey key) override;
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override;
  void on_evict(uint32_t slot, ExpertKey key) override;
  uint32_t choose_victim(const EvictableFn& evictable) override;

  uint32_t hits(uint32_t slot) const { return hits_.at(slot); }
  uint64_t last(uint32_t slot) const { return last_.at(slot); }

 private:
  uint32_t sample_;
  std::vector<uint32_t> hits_;
  std::vector<uint64_t> last_;
  uint64_t clock_ = 0;
  uint32_t rng_ = kEngineSeed;
};

}  // namespace waste::cache
