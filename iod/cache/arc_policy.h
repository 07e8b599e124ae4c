// "arc": Adaptive Replacement Cache (N. Megiddo, D. S. Modha, "ARC: A Self-Tuning, Low Overhead
// Replacement Cache", FAST 2003, Fig. 4), a baseline for the default policy. c = slots.
//
//   T1: cached keys used once since they entered (LRU order), T2: cached keys used at least
//   twice; B1, B2: ghost lists (keys only) of the records evicted from T1, T2. p: the target
//   size of T1, adapted on ghost hits.
//   Hit in T1 or T2:  move to the MRU end of T2.
//   Miss, key in B1:  p = min(c, p + max(1, |B2|/|B1|)); REPLACE; the key enters T2 (MRU).
//   Miss, key in B2:  p = max(0, p - max(1, |B1|/|B2|)); REPLACE; the key enters T2 (MRU).
//   Miss, elsewhere:  if |T1| + |B1| = c: if |T1| < c drop B1's LRU key and REPLACE, else evict
//                     T1's LRU record without a ghost; else if |T1|+|T2|+|B1|+|B2| = 2c drop B2's
//                     LRU key, and REPLACE when the cache is full. The key enters T1 (MRU).
//   REPLACE: if |T1| >= 1 and (|T1| > p or (the key is in B2 and |T1| = p)) evict T1's LRU record
//            into B1 (MRU), else T2's LRU record into B2.
//
// Mapping onto the cache's protocol (policy.h): the ghost hit and the directory trimming happen
// in on_miss (before the cache asks for a victim), REPLACE in choose_victim. A pinned record is
// skipped: the least recently used evictable record of the list REPLACE picks goes, or of the
// other list when that one has none. Guesses (prefetch, pre-warm) enter T1 at the LRU end and
// do not adapt p. Ghost lists are bounded by the algorithm (|T1|+|B1| <= c, all four <= 2c) and
// sized at reset (one node per key of the geometry).
#pragma once
#include <vector>

#include "iod/cache/index_lists.h"
#include "iod/cache/policy.h"

namespace waste::cache {

class ArcPolicy final : public CachePolicy {
 public:
  explicit ArcPolicy(const CacheGeometry& geometry) : geometry_(geometry) {}
  std::string name() const override { return "arc"; }
  void reset(uint32_t slots) override;
  void on_miss(ExpertKey key, InsertKind kind) override;
  void on_hit(uint32_t slot, ExpertKey key) override;
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override;
  void on_evict(uint32_t slot, ExpertKey key) override;
  uint32_t choose_victim(const EvictableFn& evictable) override;

  // For the tests.
  double target_t1() const { return p_; }
  uint32_t t1_size() const { return cached_.size(kT1); }
  uint32_t t2_size() const { return cached_.size(kT2); }
  uint32_t b1_size() const { return ghosts_.size(kB1); }
  uint32_t b2_size() const { return ghosts_.size(kB2); }
  bool in_b1(ExpertKey key) const { return ghosts_.owner(geometry_.key_index(key)) == kB1; }
  bool in_b2(ExpertKey key) const { return ghosts_.owner(geometry_.key_index(key)) == kB2; }

 private:
  static constexpr uint8_t kT1 = 0, kT2 = 1;  // lists of slots
  static constexpr uint8_t kB1 = 0, kB2 = 1;  // lists of key indices
  uint32_t lru_evictable(uint8_t list, const EvictableFn& evictable) const;
  void drop_ghost_lru(uint8_t list);
  void bound_ghosts();

  CacheGeometry geometry_;
  uint32_t c_ = 0;
  double p_ = 0;
  IndexLists cached_;  // slots: T1, T2 (head = MRU)
  IndexLists ghosts_;  // keys: B1, B2 (head = MRU)
  std::vector<uint32_t> slot_key_;
  uint8_t ghost_hit_ = IndexLists::kNone;  // the pending miss's key was in B1 / B2
  bool drop_t1_ = false;                   // the pending miss evicts T1's LRU without a ghost
  bool ghostless_ = false;                 // the victim chosen is not remembered in B1/B2
};

}  // namespace waste::cache
