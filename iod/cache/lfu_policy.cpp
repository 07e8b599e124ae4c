#include "iod/cache/lfu_policy.h"

namespace waste::cache {

LfuPolicy::LfuPolicy(const CacheGeometry& geometry) : geometry_(geometry) { reset(0); }

void LfuPolicy::reset(uint32_t slots) {
  count_.assign(geometry_.key_count(), 0);
  last_.assign(geometry_.key_count(), 0);
  clock_ = 0;
  slot_key_.assign(slots, kNoSlot);
  order_.clear();
}

void LfuPolicy::remove(uint32_t slot) {
  const uint32_t k = slot_key_.at(slot);
  if (k == kNoSlot) return;
  order_.erase(Entry{count_[k], last_[k], slot});
  slot_key_[slot] = kNoSlot;
}

void LfuPolicy::place(uint32_t slot, uint32_t k) {
  slot_key_.at(slot) = k;
  order_.insert(Entry{count_[k], last_[k], slot});
}

void LfuPolicy::on_hit(uint32_t slot, ExpertKey key) {
  const uint32_t k = geometry_.key_index(key);
  remove(slot);
  ++count_[k];
  last_[k] = ++clock_;
  place(slot, k);
}

void LfuPolicy::on_insert(uint32_t slot, ExpertKey key, InsertKind kind) {
  const uint32_t k = geometry_.key_index(key);
  remove(slot);
  if (kind == InsertKind::Demand) {
    ++count_[k];
    last_[k] = ++clock_;
  }
  place(slot, k);
}

void LfuPolicy::on_evict(uint32_t slot, ExpertKey) { remove(slot); }

uint32_t LfuPolicy::choose_victim(const EvictableFn& evictable) {
  for (const Entry& e : order_)
    if (evictable(std::get<2>(e))) return std::get<2>(e);
  return kNoSlot;
}

}  // namespace waste::cache
