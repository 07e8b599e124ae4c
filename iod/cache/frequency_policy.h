// Frequency-aware policies with recency, sharing one per-key statistic: a count that decays by
// `gamma` per decode step (token) and grows by 1 per access, so count * (1 - gamma) estimates the
// probability that the next token routes to the key, weighted toward recent tokens. Keys that
// are not cached keep their statistic too (a bounded table, one float per (layer, expert)), so
// an expert that comes back is recognised.
//
// Two ways to rank the cached records (pick with the mode):
//   Lrfu:   evict the smallest decayed count (LRFU-style; knows nothing of the decode order).
//   Cyclic: evict the record whose next use is expected furthest away. Decode visits the MoE
//           layers in a fixed cycle, so a record of layer l cannot be needed before layer l comes
//           round again, d steps from now (1..L). If the next token routes to it with probability
//           p, its expected distance to the next use is d + L * (1/p - 1) steps: Belady's rule
//           with the unknown future replaced by that estimate. This is what keeps useful records
//           below one working set, where LRU evicts each record just before it is needed.
// Victim choice scans the slots (O(slots) per miss): cheap next to a multi-megabyte read.
#pragma once
#include <vector>

#include "iod/cache/policy.h"

namespace waste::cache {

struct FrequencyParams {
  enum class Mode { Lrfu, Cyclic } mode = Mode::Cyclic;
  double gamma = 0.8;         // per-token decay of the access count
  double prior_weight = 1.0;  // how much the usage-file popularity adds to the estimate
  double prefetch_p = 0.5;    // assumed use probability of a prefetched, not yet demanded record
  double floor_p = 1e-4;      // estimates never go below this (no infinite distances)
};

class FrequencyPolicy final : public CachePolicy {
 public:
  FrequencyPolicy(const CacheGeometry& geometry, FrequencyParams params, KeyPrior prior = {});
  std::string name() const override;
  void reset(uint32_t slots) override;
  void on_fetch(uint32_t layer, std::span<const uint32_t> experts) override;
  void on_hit(uint32_t slot, ExpertKey key) override;
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override;
  void on_evict(uint32_t slot, ExpertKey key) override;
  uint32_t choose_victim(const EvictableFn& evictable) override;

  // Estimated probability that the next token routes to the key (for tests and stats).
  double use_probability(ExpertKey key) const;

 private:
  void advance_to(uint32_t position);
  void count_access(uint32_t key_index);
  uint32_t age(uint32_t key_index) const;  // layer visits since the key's last access
  double probability(uint32_t key_index) const;
  double eviction_score(uint32_t slot) const;  // larger = evict first

  CacheGeometry geometry_;
  FrequencyParams params_;
  KeyPrior prior_;
  std::vector<float> count_;           // per key, as of last_token_
  std::vector<uint32_t> last_token_;   // per key
  std::vector<double> decay_pow_;      // gamma^n for small n
  std::vector<uint32_t> slot_key_;     // per slot: key index or kNoSlot
  std::vector<uint64_t> prefetch_until_;  // per slot: step until which a prefetch guess holds
  uint32_t token_ = 0;                 // decode steps seen
  uint32_t position_ = 0;              // cycle position of the current layer
  bool started_ = false;
};

}  // namespace waste::cache
