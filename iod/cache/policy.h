// Pluggable expert-cache replacement policies. The cache (iod's slot table, or the offline
// simulator) owns the slots, the key -> slot map and the pins; a policy only keeps whatever
// order or statistics it needs and, when the cache is full, picks which evictable slot to
// reuse. Calls are not thread-safe: the owner serialises them (iod holds its table lock).
//
// Call protocol, per MoE layer of a decode step:
//   on_fetch(layer, experts)                    once, before the layer's lookups (a hint: it is
//                                               how a policy knows where in the cycle it is)
//   for each expert: on_hit(slot, key)          when cached, or
//                    on_miss(key, Demand)       (a hint: the key about to take a slot), then
//                    choose_victim(evictable)   when no slot is free, then on_evict(victim, old)
//                    on_insert(slot, key, Demand)
// Prefetched and pre-warmed records arrive with on_insert(..., Prefetch / Prewarm): they are
// guesses, so a policy ranks them below records that were actually demanded.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "iod/cache/geometry.h"

namespace waste::cache {

enum class InsertKind { Demand, Prefetch, Prewarm };

// True when the slot may be evicted (occupied and not pinned). Supplied by the cache owner.
using EvictableFn = std::function<bool(uint32_t slot)>;

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;
  virtual std::string name() const = 0;
  // Forget everything; the cache has `slots` slots, all free.
  virtual void reset(uint32_t slots) = 0;
  virtual void on_fetch(uint32_t layer, std::span<const uint32_t> experts) {}
  // The key the next choose_victim / on_insert is for (policies whose victim depends on the
  // missed key, e.g. ARC's ghost lists, need it before choosing).
  virtual void on_miss(ExpertKey key, InsertKind kind) {}
  virtual void on_hit(uint32_t slot, ExpertKey key) = 0;
  virtual void on_insert(uint32_t slot, ExpertKey key, InsertKind kind) = 0;
  virtual void on_evict(uint32_t slot, ExpertKey key) = 0;
  // A slot to evict among those for which evictable(slot) holds, or kNoSlot if there is none.
  virtual uint32_t choose_victim(const EvictableFn& evictable) = 0;
};

// Prior popularity per key (geometry.key_index order): the probability that a token routes to
// the key, e.g. from the container's `usage` file. Empty = no prior.
using KeyPrior = std::vector<float>;

// "forecast" (the default, forecast_policy.h), "lru", "lrfu", "cyclic", and the classic baselines
// "arc", "s3fifo", "lfu", "lfru" (arc_policy.h, s3fifo_policy.h, lfu_policy.h, lfru_policy.h), each
// optionally followed by ":name=value,..." to set tuning parameters (listed in policy_help()).
// `prior` seeds frequency policies (ignored by lru and the baselines). Throws Error for an
// unknown name.
std::unique_ptr<CachePolicy> make_policy(const std::string& spec, const CacheGeometry& geometry,
                                         const KeyPrior& prior = {});
std::vector<std::string> policy_names();
// The classic online policies the default is measured against (lru and the baselines above).
std::vector<std::string> baseline_policy_names();
std::string policy_help();
constexpr const char* kDefaultPolicy = "forecast";

}  // namespace waste::cache
