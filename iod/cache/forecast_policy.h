// "forecast" (the default): an online approximation of Belady's rule for the cyclic decode
// pattern.
//
// Belady evicts the record whose next use is furthest away. Decode visits the MoE layers in a
// fixed cycle, so a record of layer l can next be used when l next comes round, d visits from
// now (1..L), or a whole number of tokens later. What is unknown is whether that visit routes
// to it. The policy learns this online, with no constant fitted to a model:
//
//   * every key keeps a bit history of its layer's visits (1 = routed to at that visit);
//   * the history (its last kRecentBits visits exactly, a bucket of the count over the older
//     ones, and for a key not used in the recent visits how long ago its last use was) and,
//     when a usage file is loaded, the key's popularity bucket form a class;
//   * at every visit of a layer, each key of that layer is one sample of its class: was it
//     routed to at this visit? The per-class frequency (smoothed toward a coarser parent class
//     while a class has few samples) is the probability p that the key's next visit uses it.
//     Learned from this run's past only; counts halve from time to time so it follows a
//     drifting workload.
//
// Eviction: the evictable key whose next use is expected furthest away, d + L * (1/p - 1)
// visits (d, then a geometric number of further tokens), goes first. Among keys with equal p,
// the one whose layer comes round last goes, as the cycle dictates; a demand-missed key with a
// low p is the first to go once its layer is done (Belady's "bypass", after the record has
// served the layer that needed it). A record the layer being fetched still has to pin goes
// last. Prefetched records count as p >= prefetch until their layer's visit; pre-warmed ones
// rank one token further away until a demand hits them.
//
// Cost: O(experts per layer) table updates per layer visit. The victim choice looks at one
// score per group of slots with equal (layer position, class, guess state) (slot_groups.h):
// O(non-empty groups) per miss (at most min(slots, positions x classes x 3)) plus the slots of
// the groups with the top score, and O(1) to move a slot when its state changes;
// docs/MEASUREMENTS.md has ns/access.
#pragma once
#include <cstdint>
#include <vector>

#include "iod/cache/policy.h"
#include "iod/cache/slot_groups.h"

namespace waste::cache {

struct ForecastParams {
  double prefetch_p = 0.5;  // use probability assumed for a prefetched record until its layer's visit
  double prior_weight = 1;  // scales the usage-file popularity before bucketing; 0 ignores the prior
  double halve_at = 4096;   // a class's counts halve when its sample count reaches this
};

class ForecastPolicy final : public CachePolicy {
 public:
  ForecastPolicy(const CacheGeometry& geometry, ForecastParams params, KeyPrior prior = {});
  std::string name() const override { return "forecast"; }
  void reset(uint32_t slots) override;
  void on_fetch(uint32_t layer, std::span<const uint32_t> experts) override;
  void on_hit(uint32_t slot, ExpertKey key) override;
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override;
  void on_evict(uint32_t slot, ExpertKey key) override;
  uint32_t choose_victim(const EvictableFn& evictable) override;
  // The same choice by scanning every slot (the definition the grouped choice must match;
  // kept for the tests).
  uint32_t choose_victim_scan(const EvictableFn& evictable) const;

  // The learned probability that the next visit of the key's layer routes to it.
  double use_probability(ExpertKey key) const;

  static constexpr uint32_t kRecentBits = 3;    // most recent visits kept exactly in the class
  // Buckets of the routed-to count over the older visits: the 29 before the recent ones for a
  // key used in its recent visits, the 61 before them for a quiet one (a longer memory where
  // the recent bits say nothing).
  static constexpr uint32_t kCountBuckets = 9;
  // For a key not routed to in its kRecentBits last visits but before: visits since its last
  // use, 3-7, 8-15, 16-31, 32-63, 64-127, 128+ (buckets 1-6; 0 = used recently, or never).
  static constexpr uint32_t kAgeBuckets = 7;
  static constexpr uint32_t kPriorBuckets = 5;  // usage-file popularity buckets (all 0 without)
  static constexpr uint32_t kClasses = (1u << kRecentBits) * kCountBuckets * kAgeBuckets * kPriorBuckets;

 private:
  uint32_t class_of(uint32_t key) const;
  void set_far(uint32_t cls);
  // Puts the slot in the group of its current state (or none when free).
  void regroup(uint32_t slot);

  CacheGeometry geometry_;
  ForecastParams params_;
  double base_p_ = 0;                // top_k / experts: the uninformed probability
  float prefetch_far_ = 0;           // far term of a prefetch guess
  std::vector<uint8_t> prior_bucket_;  // per key
  std::vector<uint64_t> history_;      // per key: bit i = routed to at its layer's (i+1)-th last visit
  std::vector<uint32_t> idle_;         // per key: its layer's visits since it was last routed to
                                       // (kNeverUsed before the first time), saturating
  std::vector<uint16_t> class_;        // per key: class_of(history), kept in step with it
  std::vector<float> yes_, seen_;      // per class: samples routed to, all samples
  std::vector<float> visit_yes_, visit_seen_;  // per class: samples of the current visit
  std::vector<uint8_t> touched_;       // per class: sampled during the current visit
  std::vector<uint32_t> touched_list_;  // the classes with touched_ set
  std::vector<float> p_;               // per class: (yes + w * parent p) / (seen + w)
  // The parent of a class: the same recent bits and prior bucket, any older count. A class
  // seen rarely (a key's count bucket grows during warm-up) leans on its parent's estimate.
  std::vector<float> parent_yes_, parent_seen_, parent_p_;
  static uint32_t parent_of(uint32_t cls) {
    return (cls / ((1u << kRecentBits) * kCountBuckets)) * (1u << kRecentBits) + cls % (1u << kRecentBits);
  }
  std::vector<float> far_;             // per class: L * (1/p - 1), the expected further visits
  std::vector<uint8_t> routed_;        // per expert: routed to by the current layer visit
  std::vector<uint32_t> current_;      // the experts with routed_ set
  uint32_t position_ = 0;              // cycle position of the layer visited last
  std::vector<uint32_t> slot_key_;     // per slot: key index or kNoSlot
  std::vector<uint32_t> key_slot_;     // per key: its slot or kNoSlot
  // Per slot: the key's class, or kFreeSlot (kept in step so the victim scan reads one array).
  std::vector<uint16_t> slot_class_;
  static constexpr uint16_t kFreeSlot = 0xFFFF;
  static constexpr uint32_t kNeverUsed = 0xFFFFFFFFu;
  static_assert(kClasses < kFreeSlot);
  std::vector<uint32_t> slot_pos_;     // per slot: cycle position of the key's layer
  std::vector<uint8_t> slot_guess_;    // per slot: 1 = prefetched, not hit since;
                                       // 2 = pre-warmed, not hit since
  std::vector<uint64_t> guess_until_;  // per slot: a prefetch guess holds while visits_ < this
  uint64_t visits_ = 0;                // layer visits so far
  std::vector<uint32_t> distance_;     // per cycle position: visits until it next comes round
  // Slots grouped by (cycle position, class, guess state: 0 demanded or expired prefetch,
  // 1 prefetch still in its guess window, 2 pre-warmed): one score per group.
  SlotGroups groups_;
  // Prefetch guesses by the visit count at which they expire (min-heap of (until, slot); an
  // entry whose slot has moved on is skipped), so an expired guess leaves group state 1.
  std::vector<std::pair<uint64_t, uint32_t>> guess_expiry_;
  std::vector<float> group_score_;  // choose_victim's scratch: per non-empty group, its score
};

}  // namespace waste::cache
