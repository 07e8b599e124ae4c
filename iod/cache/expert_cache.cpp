#include "iod/cache/expert_cache.h"

#include "shared/util/error.h"

namespace waste::cache {

ExpertCache::ExpertCache(const CacheGeometry& geometry, uint32_t slots, CachePolicy& policy)
    : geometry_(geometry), policy_(policy) {
  require(slots > 0, "expert cache: needs at least one slot");
  slot_key_.assign(slots, kNoSlot);
  key_slot_.assign(geometry_.key_count(), kNoSlot);
  pins_.assign(slots, 0);
  quarantined_slot_.assign(slots, false);
  free_.reserve(slots);
  for (uint32_t s = slots; s-- > 0;) free_.push_back(s);  // hand out slot 0 first
  policy_.reset(slots);
}

void ExpertCache::begin_layer(uint32_t layer, std::span<const uint32_t> experts) { policy_.on_fetch(layer, experts); }

uint32_t ExpertCache::find(ExpertKey key) const { return key_slot_[geometry_.key_index(key)]; }

uint32_t ExpertCache::take_slot(Acquired& out) {
  if (!free_.empty()) {
    uint32_t s = free_.back();
    free_.pop_back();
    ++occupied_;
    return s;
  }
  uint32_t victim = policy_.choose_victim([this](uint32_t s) { return slot_key_[s] != kNoSlot && pins_[s] == 0; });
  if (victim == kNoSlot) return kNoSlot;
  if (victim >= slots() || slot_key_[victim] == kNoSlot || pins_[victim] != 0)  // message built only on failure
    throw Error("expert cache: policy " + policy_.name() + " chose slot " + std::to_string(victim) +
                ", which is not evictable");
  out.evicted = true;
  out.victim = geometry_.key_at(slot_key_[victim]);
  policy_.on_evict(victim, out.victim);
  key_slot_[slot_key_[victim]] = kNoSlot;
  slot_key_[victim] = kNoSlot;
  return victim;
}

Acquired ExpertCache::acquire(ExpertKey key) {
  uint32_t k = geometry_.key_index(key);
  Acquired out;
  if (uint32_t s = key_slot_[k]; s != kNoSlot) {
    out.slot = s;
    out.hit = true;
    ++pins_[s];
    policy_.on_hit(s, key);
    return out;
  }
  policy_.on_miss(key, InsertKind::Demand);
  uint32_t s = take_slot(out);
  if (s == kNoSlot) return out;
  slot_key_[s] = k;
  key_slot_[k] = s;
  ++pins_[s];
  policy_.on_insert(s, key, InsertKind::Demand);
  out.slot = s;
  return out;
}

uint32_t ExpertCache::touch(ExpertKey key) {
  const uint32_t s = key_slot_[geometry_.key_index(key)];
  if (s != kNoSlot) policy_.on_hit(s, key);
  return s;
}

Acquired ExpertCache::insert_guess(ExpertKey key, InsertKind kind) {
  require(kind != InsertKind::Demand, "expert cache: insert_guess is for prefetch/prewarm");
  uint32_t k = geometry_.key_index(key);
  Acquired out;
  if (key_slot_[k] != kNoSlot) return out;
  policy_.on_miss(key, kind);
  uint32_t s = take_slot(out);
  if (s == kNoSlot) return out;
  slot_key_[s] = k;
  key_slot_[k] = s;
  policy_.on_insert(s, key, kind);
  out.slot = s;
  return out;
}

void ExpertCache::unpin(uint32_t slot) {
  if (slot >= slots() || pins_[slot] == 0)  // message built only on failure (a hot path)
    throw Error("expert cache: unpin of slot " + std::to_string(slot) + ", not pinned");
  --pins_[slot];
}

void ExpertCache::quarantine(uint32_t slot) {
  if (slot >= slots() || slot_key_[slot] == kNoSlot)
    throw Error("expert cache: quarantine of slot " + std::to_string(slot) + ", which holds no key");
  const uint32_t k = slot_key_[slot];
  policy_.on_evict(slot, geometry_.key_at(k));
  key_slot_[k] = kNoSlot;
  // Without a key the slot is never evictable (take_slot's test), and it is not put back on
  // free_: it stays counted in occupied_, so "free = slots - occupied" never offers it.
  slot_key_[slot] = kNoSlot;
  quarantined_slot_[slot] = true;
  ++quarantined_;
}

}  // namespace waste::cache
