// "s3fifo": S3-FIFO (J. Yang, Y. Zhang, Z. Qiu, Y. Yue, K. V. Rashmi, "FIFO queues are all you
// need for cache eviction", SOSP 2023, Algorithm 1), a baseline for the default policy.
//
//   S: a small FIFO of 10% of the slots (at least 1), M: the main FIFO (the rest), G: a ghost
//   FIFO of keys only, as many entries as M has slots. Each cached record has a 2-bit
//   frequency (0..3), +1 per hit.
//   Insert: into M if the key is in G (and out of G), else into S; frequency 0. (G is looked up
//           at the miss, before the eviction that makes room: on_miss.)
//   Evict:  from M if M holds more than its share or S is empty, else from S.
//   From S: the oldest record; if it was hit at least once it moves to M (frequency cleared)
//           and the next oldest is looked at; else it is evicted and its key enters G (G drops
//           its oldest key when full).
//   From M: the oldest record; if its frequency is > 0 it is reinserted at M's head with
//           frequency - 1 (FIFO-reinsertion / 2-bit CLOCK); else it is evicted.
//
// Pinned records are skipped where they stand (neither moved nor aged); when the queue the rule
// picks has no evictable record, the other one is used. Guesses (prefetch, pre-warm) enter S at
// its oldest end: evicted first unless hit. G is bounded (sized at reset).
#pragma once
#include <vector>

#include "iod/cache/index_lists.h"
#include "iod/cache/policy.h"

namespace waste::cache {

class S3FifoPolicy final : public CachePolicy {
 public:
  // small_ratio: S's share of the slots (the paper's 10%).
  S3FifoPolicy(const CacheGeometry& geometry, double small_ratio = 0.1);
  std::string name() const override { return "s3fifo"; }
  void reset(uint32_t slots) override;
  void on_miss(ExpertKey key, InsertKind kind) override;
  void on_hit(uint32_t slot, ExpertKey key) override;
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override;
  void on_evict(uint32_t slot, ExpertKey key) override;
  uint32_t choose_victim(const EvictableFn& evictable) override;

  // For the tests.
  uint32_t small_capacity() const { return small_cap_; }
  uint32_t main_capacity() const { return main_cap_; }
  uint32_t small_size() const { return queues_.size(kSmall); }
  uint32_t main_size() const { return queues_.size(kMain); }
  bool in_ghost(ExpertKey key) const { return ghost_.owner(geometry_.key_index(key)) == 0; }
  bool in_main(uint32_t slot) const { return queues_.owner(slot) == kMain; }
  uint32_t frequency(uint32_t slot) const { return freq_.at(slot); }

 private:
  static constexpr uint8_t kSmall = 0, kMain = 1;
  uint32_t evict_small(const EvictableFn& evictable);
  uint32_t evict_main(const EvictableFn& evictable);

  CacheGeometry geometry_;
  double small_ratio_;
  uint32_t small_cap_ = 0, main_cap_ = 0, ghost_cap_ = 0;
  IndexLists queues_;  // slots: S, M (head = newest)
  IndexLists ghost_;   // keys: G (one list, head = newest)
  std::vector<uint8_t> freq_;  // per slot
  uint32_t ghost_hit_ = kNoSlot;  // the pending miss's key, when it was in G (on_miss took it out)
};

}  // namespace waste::cache
