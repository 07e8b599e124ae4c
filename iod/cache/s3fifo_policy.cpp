#include "iod/cache/s3fifo_policy.h"

#include <algorithm>
#include <cmath>

#include "shared/util/error.h"

namespace waste::cache {

S3FifoPolicy::S3FifoPolicy(const CacheGeometry& geometry, double small_ratio)
    : geometry_(geometry), small_ratio_(small_ratio) {
  require(small_ratio > 0 && small_ratio < 1, "cache policy s3fifo: small must be in (0, 1)");
}

void S3FifoPolicy::reset(uint32_t slots) {
  small_cap_ = std::max<uint32_t>(1, uint32_t(std::llround(small_ratio_ * slots)));
  if (slots > 1) small_cap_ = std::min(small_cap_, slots - 1);
  main_cap_ = slots > small_cap_ ? slots - small_cap_ : 0;
  ghost_cap_ = std::max<uint32_t>(1, main_cap_);
  queues_.reset(slots, 2);
  ghost_.reset(geometry_.key_count(), 1);
  freq_.assign(slots, 0);
  ghost_hit_ = kNoSlot;
}

void S3FifoPolicy::on_miss(ExpertKey key, InsertKind kind) {
  const uint32_t k = geometry_.key_index(key);
  ghost_hit_ = kind == InsertKind::Demand && ghost_.owner(k) == 0 ? k : kNoSlot;
  ghost_.unlink(k);
}

void S3FifoPolicy::on_hit(uint32_t slot, ExpertKey) {
  if (freq_.at(slot) < 3) ++freq_[slot];
}

void S3FifoPolicy::on_insert(uint32_t slot, ExpertKey key, InsertKind kind) {
  const uint32_t k = geometry_.key_index(key);
  const bool ghosted = kind == InsertKind::Demand && (ghost_hit_ == k || ghost_.owner(k) == 0);
  ghost_hit_ = kNoSlot;
  ghost_.unlink(k);
  freq_.at(slot) = 0;
  if (kind != InsertKind::Demand) queues_.push_tail(kSmall, slot);  // a guess: S's oldest end
  else if (ghosted) queues_.push_head(kMain, slot);
  else queues_.push_head(kSmall, slot);
}

void S3FifoPolicy::on_evict(uint32_t slot, ExpertKey key) {
  const uint8_t q = queues_.owner(slot);
  queues_.unlink(slot);
  freq_.at(slot) = 0;
  if (q != kSmall) return;  // out of M: gone for good
  ghost_.push_head(0, geometry_.key_index(key));
  if (ghost_.size(0) > ghost_cap_) ghost_.unlink(ghost_.tail(0));
}

uint32_t S3FifoPolicy::evict_small(const EvictableFn& evictable) {
  for (uint32_t s = queues_.tail(kSmall); s != kNoSlot;) {
    const uint32_t newer = queues_.toward_head(s);
    if (evictable(s)) {
      if (freq_[s] == 0) return s;
      freq_[s] = 0;  // hit while in S: promoted to M, its frequency cleared
      queues_.push_head(kMain, s);
    }
    s = newer;
  }
  return kNoSlot;
}

uint32_t S3FifoPolicy::evict_main(const EvictableFn& evictable) {
  // Each evictable record is reinserted at most 3 times (its frequency drops each time), so
  // 4 passes over M end the walk; pinned records are only stepped over.
  const uint64_t limit = 5ull * (queues_.size(kMain) + 1);
  uint32_t s = queues_.tail(kMain);
  for (uint64_t step = 0; step < limit; ++step) {
    if (s == kNoSlot) s = queues_.tail(kMain);  // past the head: around again
    if (s == kNoSlot) break;
    const uint32_t newer = queues_.toward_head(s);
    if (evictable(s)) {
      if (freq_[s] == 0) return s;
      --freq_[s];
      queues_.push_head(kMain, s);
    }
    s = newer;
  }
  return kNoSlot;
}

uint32_t S3FifoPolicy::choose_victim(const EvictableFn& evictable) {
  if (queues_.size(kMain) > main_cap_ || queues_.size(kSmall) == 0) {
    if (uint32_t s = evict_main(evictable); s != kNoSlot) return s;
    return evict_small(evictable);
  }
  if (uint32_t s = evict_small(evictable); s != kNoSlot) return s;
  return evict_main(evictable);  // everything in S was promoted (or is pinned)
}

}  // namespace waste::cache
