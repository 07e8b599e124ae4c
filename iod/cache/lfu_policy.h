// "lfu": LFU with history ("perfect" LFU), a baseline for the default policy: every key's
// access count is kept for the whole run, also while the key is not cached, so a record that
// comes back resumes its count. The victim is the evictable record with the lowest count; ties
// go to the least recently accessed (then the lowest slot).
//
// An access is a demand: a hit or a demand miss (on_hit / on_insert(Demand)) adds 1 and stamps
// the access time. A guess (prefetch, pre-warm) is no access: it is ranked by the key's count and
// last access so far (0 and never for a key not seen yet, so it goes before anything used).
// Memory: two counters per key of the geometry, fixed at construction.
#pragma once
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "iod/cache/policy.h"

namespace waste::cache {

class LfuPolicy final : public CachePolicy {
 public:
  explicit LfuPolicy(const CacheGeometry& geometry);
  std::string name() const override { return "lfu"; }
  void reset(uint32_t slots) override;
  void on_hit(uint32_t slot, ExpertKey key) override;
  void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) override;
  void on_evict(uint32_t slot, ExpertKey key) override;
  uint32_t choose_victim(const EvictableFn& evictable) override;

  uint64_t count(ExpertKey key) const { return count_.at(geometry_.key_index(key)); }

 private:
  void place(uint32_t slot, uint32_t key);  // (re)files the slot under its key's count and time
  void remove(uint32_t slot);

  CacheGeometry geometry_;
  std::vector<uint64_t> count_, last_;  // per key, kept across evictions
  uint64_t clock_ = 0;                   // demand accesses so far
  std::vector<uint32_t> slot_key_;
  using Entry = std::tuple<uint64_t, uint64_t, uint32_t>;  // (count, last access, slot)
  std::set<Entry> order_;  // cached records, lowest count / oldest first
};

}  // namespace waste::cache
