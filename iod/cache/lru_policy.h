// Least recently used: the baseline. On a cyclic decode pattern it evicts exactly the record
// needed next whenever the cache holds less than one token's working set, so it gets 0% there.
#pragma once
#include <vector>

#include "iod/cache/policy.h"

namespace waste::cache {

class LruPolicy final : public CachePolicy {
 public:
  std::string name() const override { return "lru"; }
  void reset(uint32_t slots) override;
  void on_hit(uint32_t slot, ExpertKey key) override;
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override;
  void on_evict(uint32_t slot, ExpertKey key) override;
  uint32_t choose_victim(const EvictableFn& evictable) override;

 private:
  // Intrusive doubly linked list over slots; head = most recent, tail = least recent.
  void unlink(uint32_t slot);
  void push_front(uint32_t slot);
  void push_back(uint32_t slot);
  std::vector<uint32_t> prev_, next_;
  std::vector<bool> linked_;
  uint32_t head_ = kNoSlot, tail_ = kNoSlot;
};

}  // namespace waste::cache
