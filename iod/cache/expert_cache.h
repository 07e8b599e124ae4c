// The bookkeeping of an expert cache with a fixed number of slots: which key each slot holds,
// the key -> slot map, pin counts, and the policy calls in the documented order. Single-threaded
// (the owner locks). iod wraps it around its shared-memory slot table; the simulator drives it
// from a routing trace. It never touches record bytes: a caller that gets `inserted` reads the
// record into the slot.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "iod/cache/geometry.h"
#include "iod/cache/policy.h"

namespace waste::cache {

struct Acquired {
  uint32_t slot = kNoSlot;  // kNoSlot: every slot is pinned, nothing could be evicted
  bool hit = false;
  bool evicted = false;     // the slot held `victim` before
  ExpertKey victim{};
};

class ExpertCache {
 public:
  ExpertCache(const CacheGeometry& geometry, uint32_t slots, CachePolicy& policy);

  uint32_t slots() const { return uint32_t(slot_key_.size()); }
  // Slots not free: holding a key, or quarantined.
  uint32_t occupied() const { return occupied_; }
  uint32_t quarantined() const { return quarantined_; }
  const CacheGeometry& geometry() const { return geometry_; }

  // Tells the policy a layer is about to be fetched (see policy.h).
  void begin_layer(uint32_t layer, std::span<const uint32_t> experts);
  // Finds or loads the key and pins it (demand).
  Acquired acquire(ExpertKey key);
  // A use the caller already had (a client read the slot unpinned; iod: touch): the policy sees
  // on_hit as for a demand; nothing is pinned or loaded. Returns the slot, or kNoSlot when the
  // key is no longer cached (evicted since the use: no slot to credit).
  uint32_t touch(ExpertKey key);
  // Inserts a guess (prefetch / prewarm) into a free or evictable slot, unpinned. Returns
  // the slot, or kNoSlot when the key is cached already or nothing could be evicted.
  Acquired insert_guess(ExpertKey key, InsertKind kind);
  void unpin(uint32_t slot);
  // Forgets the key the slot holds (the policy sees on_evict; a later acquire of the key loads
  // it into another slot) and takes the slot out of use for good: never free, never a victim,
  // never handed out again. For a slot the kernel may still write into (iod: a read a dead
  // io_uring abandoned). Pins on it stay until unpinned.
  void quarantine(uint32_t slot);
  bool is_quarantined(uint32_t slot) const { return quarantined_slot_.at(slot); }
  bool pinned(uint32_t slot) const { return pins_.at(slot) > 0; }
  uint32_t find(ExpertKey key) const;  // slot or kNoSlot
  bool holds(uint32_t slot) const { return slot_key_.at(slot) != kNoSlot; }
  ExpertKey key_in(uint32_t slot) const { return geometry_.key_at(slot_key_.at(slot)); }

 private:
  uint32_t take_slot(Acquired& out);

  CacheGeometry geometry_;
  CachePolicy& policy_;
  std::vector<uint32_t> slot_key_;  // key index per slot, or kNoSlot when free
  std::vector<uint32_t> key_slot_;  // slot per key index, or kNoSlot
  std::vector<uint32_t> pins_;
  std::vector<uint32_t> free_;      // free slots, popped from the back
  std::vector<bool> quarantined_slot_;
  uint32_t occupied_ = 0;
  uint32_t quarantined_ = 0;
};

}  // namespace waste::cache
