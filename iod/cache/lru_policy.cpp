#include "iod/cache/lru_policy.h"

namespace waste::cache {

void LruPolicy::reset(uint32_t slots) {
  prev_.assign(slots, kNoSlot);
  next_.assign(slots, kNoSlot);
  linked_.assign(slots, false);
  head_ = tail_ = kNoSlot;
}

void LruPolicy::unlink(uint32_t slot) {
  if (!linked_.at(slot)) return;
  uint32_t p = prev_[slot], n = next_[slot];
  (p == kNoSlot ? head_ : next_[p]) = n;
  (n == kNoSlot ? tail_ : prev_[n]) = p;
  prev_[slot] = next_[slot] = kNoSlot;
  linked_[slot] = false;
}

void LruPolicy::push_front(uint32_t slot) {
  prev_[slot] = kNoSlot;
  next_[slot] = head_;
  (head_ == kNoSlot ? tail_ : prev_[head_]) = slot;
  head_ = slot;
  linked_[slot] = true;
}

void LruPolicy::push_back(uint32_t slot) {
  next_[slot] = kNoSlot;
  prev_[slot] = tail_;
  (tail_ == kNoSlot ? head_ : next_[tail_]) = slot;
  tail_ = slot;
  linked_[slot] = true;
}

void LruPolicy::on_hit(uint32_t slot, ExpertKey) {
  unlink(slot);
  push_front(slot);
}

void LruPolicy::on_insert(uint32_t slot, ExpertKey, InsertKind kind) {
  unlink(slot);
  // A guess (prefetch, pre-warm) starts at the cold end: it must earn its place with a hit.
  if (kind == InsertKind::Demand) push_front(slot);
  else push_back(slot);
}

void LruPolicy::on_evict(uint32_t slot, ExpertKey) { unlink(slot); }

uint32_t LruPolicy::choose_victim(const EvictableFn& evictable) {
  for (uint32_t s = tail_; s != kNoSlot; s = prev_[s])
    if (evictable(s)) return s;
  return kNoSlot;
}

}  // namespace waste::cache
