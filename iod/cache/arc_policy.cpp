#include "iod/cache/arc_policy.h"

#include <algorithm>

namespace waste::cache {

void ArcPolicy::reset(uint32_t slots) {
  c_ = slots;
  p_ = 0;
  cached_.reset(slots, 2);
  ghosts_.reset(geometry_.key_count(), 2);
  slot_key_.assign(slots, kNoSlot);
  ghost_hit_ = IndexLists::kNone;
  drop_t1_ = ghostless_ = false;
}

void ArcPolicy::drop_ghost_lru(uint8_t list) {
  if (uint32_t k = ghosts_.tail(list); k != kNoSlot) ghosts_.unlink(k);
}

// The algorithm keeps these bounds by itself; this only restores them after a call sequence it
// does not model (a quarantined slot's on_evict, a guess inserted without a miss).
void ArcPolicy::bound_ghosts() {
  while (cached_.size(kT1) + ghosts_.size(kB1) > c_ && ghosts_.size(kB1) > 0) drop_ghost_lru(kB1);
  auto total = [&] { return cached_.size(kT1) + cached_.size(kT2) + ghosts_.size(kB1) + ghosts_.size(kB2); };
  while (total() > 2 * c_ && ghosts_.size(kB2) > 0) drop_ghost_lru(kB2);
  while (total() > 2 * c_ && ghosts_.size(kB1) > 0) drop_ghost_lru(kB1);
}

void ArcPolicy::on_miss(ExpertKey key, InsertKind kind) {
  const uint32_t k = geometry_.key_index(key);
  const uint8_t ghost = ghosts_.owner(k);
  ghost_hit_ = IndexLists::kNone;
  drop_t1_ = false;
  const double b1 = ghosts_.size(kB1), b2 = ghosts_.size(kB2);
  if (kind == InsertKind::Demand && ghost == kB1) {  // case II
    p_ = std::min<double>(c_, p_ + std::max(1.0, b2 / b1));
    ghost_hit_ = kB1;
    ghosts_.unlink(k);
    return;
  }
  if (kind == InsertKind::Demand && ghost == kB2) {  // case III
    p_ = std::max(0.0, p_ - std::max(1.0, b1 / b2));
    ghost_hit_ = kB2;
    ghosts_.unlink(k);
    return;
  }
  if (ghost != IndexLists::kNone) ghosts_.unlink(k);  // a guess for a ghost key: no adaptation
  // Case IV: a key in no list.
  const uint32_t t1 = cached_.size(kT1), t2 = cached_.size(kT2);
  if (t1 + ghosts_.size(kB1) >= c_) {
    if (t1 < c_) drop_ghost_lru(kB1);
    else drop_t1_ = true;
  } else if (t1 + t2 + ghosts_.size(kB1) + ghosts_.size(kB2) >= 2 * c_) {
    drop_ghost_lru(kB2);
  }
}

void ArcPolicy::on_hit(uint32_t slot, ExpertKey key) {
  slot_key_.at(slot) = geometry_.key_index(key);
  cached_.push_head(kT2, slot);
}

void ArcPolicy::on_insert(uint32_t slot, ExpertKey key, InsertKind kind) {
  const uint32_t k = geometry_.key_index(key);
  slot_key_.at(slot) = k;
  ghosts_.unlink(k);
  if (kind != InsertKind::Demand) cached_.push_tail(kT1, slot);  // a guess: the cold end of T1
  else if (ghost_hit_ != IndexLists::kNone) cached_.push_head(kT2, slot);
  else cached_.push_head(kT1, slot);
  ghost_hit_ = IndexLists::kNone;
  drop_t1_ = ghostless_ = false;
  bound_ghosts();
}

void ArcPolicy::on_evict(uint32_t slot, ExpertKey key) {
  const uint8_t list = cached_.owner(slot);
  cached_.unlink(slot);
  slot_key_.at(slot) = kNoSlot;
  if (!ghostless_ && list != IndexLists::kNone) ghosts_.push_head(list == kT1 ? kB1 : kB2, geometry_.key_index(key));
  ghostless_ = false;
  bound_ghosts();
}

uint32_t ArcPolicy::lru_evictable(uint8_t list, const EvictableFn& evictable) const {
  for (uint32_t s = cached_.tail(list); s != kNoSlot; s = cached_.toward_head(s))
    if (evictable(s)) return s;
  return kNoSlot;
}

uint32_t ArcPolicy::choose_victim(const EvictableFn& evictable) {
  if (drop_t1_) {  // case IV with T1 = c: T1's LRU record goes, no ghost kept
    ghostless_ = true;
    if (uint32_t s = lru_evictable(kT1, evictable); s != kNoSlot) return s;
    ghostless_ = false;
    return lru_evictable(kT2, evictable);
  }
  const double t1 = cached_.size(kT1);
  const bool from_t1 = t1 >= 1 && (t1 > p_ || (ghost_hit_ == kB2 && t1 == p_));
  const uint8_t first = from_t1 ? kT1 : kT2, second = from_t1 ? kT2 : kT1;
  if (uint32_t s = lru_evictable(first, evictable); s != kNoSlot) return s;
  return lru_evictable(second, evictable);
}

}  // namespace waste::cache
