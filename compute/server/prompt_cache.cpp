#include "compute/server/prompt_cache.h"

#include <algorithm>

namespace waste::server {

PromptCache::PromptCache(uint64_t budget_bytes, size_t max_entries)
    : budget_(budget_bytes), max_entries_(std::max<size_t>(max_entries, 1)) {
  stats_.budget_bytes = budget_;
}

uint64_t PromptCache::checkpoint_bytes(const Session& state, size_t ids, size_t vocab) {
  return state.state_bytes() + ids * sizeof(int32_t) + vocab * sizeof(float) + sizeof(Checkpoint);
}

std::shared_ptr<const PromptCache::Checkpoint> PromptCache::match(const std::string& scope, std::span<const int32_t> prompt) {
  std::lock_guard lk(mu_);
  ++stats_.lookups;
  auto best = lru_.end();
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const Checkpoint& c = **it;
    if (c.scope != scope || c.ids.size() > prompt.size()) continue;
    if (best != lru_.end() && (*best)->ids.size() >= c.ids.size()) continue;
    if (std::equal(c.ids.begin(), c.ids.end(), prompt.begin())) best = it;
  }
  if (best == lru_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, best);  // now the most recently used
  ++stats_.hits;
  stats_.cached_tokens += lru_.front()->ids.size();
  return lru_.front();
}

void PromptCache::insert(const std::string& scope, std::span<const int32_t> ids, const Session& state,
                         std::span<const float> logits) {
  if (budget_ == 0 || ids.empty()) return;
  const uint64_t bytes = checkpoint_bytes(state, ids.size(), logits.size());
  {
    std::lock_guard lk(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      const Checkpoint& c = **it;
      if (c.scope == scope && std::equal(c.ids.begin(), c.ids.end(), ids.begin(), ids.end())) {
        lru_.splice(lru_.begin(), lru_, it);  // the same state again (deterministic): keep the one held
        return;
      }
    }
    if (bytes > budget_) {
      ++stats_.too_large;
      return;
    }
    // Room first, then the copy: the bytes held never pass the budget, not even for a moment.
    while (!lru_.empty() && (stats_.bytes + bytes > budget_ || lru_.size() >= max_entries_)) evict_oldest();
    stats_.bytes += bytes;  // reserved for the copy below (one inserter: the compute worker)
  }
  // The copy (tens of MiB at full width) is made outside the lock, so stats() never waits on it.
  auto c = std::make_shared<Checkpoint>();
  c->scope = scope;
  c->ids.assign(ids.begin(), ids.end());
  c->state = state;
  c->logits.assign(logits.begin(), logits.end());
  c->bytes = bytes;
  std::lock_guard lk(mu_);
  lru_.push_front(std::move(c));
  stats_.entries = lru_.size();
  ++stats_.inserted;
}

void PromptCache::evict_oldest() {
  stats_.bytes -= lru_.back()->bytes;
  lru_.pop_back();  // a request restoring from it holds its own reference until it has copied it
  stats_.entries = lru_.size();
  ++stats_.evicted;
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

}  // namespace waste::server
