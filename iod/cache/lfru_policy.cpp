#include "iod/cache/lfru_policy.h"

namespace waste::cache {

void LfruPolicy::reset(uint32_t slots) {
  hits_.assign(slots, 0);
  last_.assign(slots, 0);
  clock_ = 0;
  rng_ = kEngineSeed;
}

void LfruPolicy::on_hit(uint32_t slot, ExpertKey) {
  ++clock_;
  ++hits_.at(slot);
  last_[slot] = clock_;
}

void LfruPolicy::on_insert(uint32_t slot, ExpertKey, InsertKind kind) {
  if (kind == InsertKind::Demand) ++clock_;  // a speculative claim does not advance the clock
  hits_.at(slot) = 1;
  last_[slot] = clock_;
}

void LfruPolicy::on_evict(uint32_t slot, ExpertKey) {
  hits_.at(slot) = 0;
  last_[slot] = 0;
}

uint32_t LfruPolicy::choose_victim(const EvictableFn& evictable) {
  const uint32_t n = uint32_t(hits_.size());
  if (n == 0) return kNoSlot;
  uint32_t best = kNoSlot;
  auto better = [&](uint32_t s) {
    return best == kNoSlot || hits_[s] < hits_[best] || (hits_[s] == hits_[best] && last_[s] < last_[best]);
  };
  if (sample_ == 0) {
    for (uint32_t s = 0; s < n; ++s)
      if (better(s) && evictable(s)) best = s;
    return best;
  }
  for (uint32_t i = 0; i < sample_; ++i) {
    rng_ = rng_ * 1664525u + 1013904223u;
    const uint32_t s = rng_ % n;
    if (evictable(s) && better(s)) best = s;
  }
  if (best == kNoSlot)
    for (uint32_t s = 0; s < n; ++s)
      if (evictable(s)) return s;
  return best;
}

}  // namespace waste::cache
