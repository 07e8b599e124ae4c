// The prompt cache: checkpoints of session states taken at the end of each prompt's prefill,
// so that the next turn of a conversation (which the stateless OpenAI API sends whole again)
// starts from the state of the turn before and prefills only what is new.
//
// A checkpoint is a copy of the whole state (Session is a value) plus the ids it holds and the
// logits after its last id. A lookup finds the longest checkpoint whose ids are a prefix of the
// prompt: recurrent (KDA) layers cannot be cut back to an arbitrary prefix, so a match is only
// ever to a whole checkpoint, and a prompt that shares part of one costs nothing extra. A
// checkpoint equal to the whole prompt needs no prefill at all (its logits are kept).
//
// Checkpoints are kept per scope (the API key's when keys are on): a scope's checkpoints never
// serve another scope. Bounded by bytes (state + ids + logits) and by count; the least recently
// used goes first. Used by the compute worker; stats() may be read from any thread.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "compute/model/session.h"
#include "shared/stats/engine_stats.h"

namespace waste::server {

// What stats() reports: one definition (shared/stats/engine_stats.h) for compute and its clients.
using stats::PromptCacheStats;

class PromptCache {
 public:
  struct Checkpoint {
    std::string scope;
    std::vector<int32_t> ids;
    Session state;
    std::vector<float> logits;  // after ids.back()
    uint64_t bytes = 0;
  };

  // budget_bytes 0: off (every lookup misses, nothing is kept).
  explicit PromptCache(uint64_t budget_bytes, size_t max_entries = 4096);

  // The longest checkpoint of `scope` whose ids are a prefix of `prompt` (possibly all of it),
  // now the most recently used; nullptr when none is. Counts a lookup.
  std::shared_ptr<const Checkpoint> match(const std::string& scope, std::span<const int32_t> prompt);

  // Keeps a copy of `state` (holding `ids`, with `logits` after the last) for `scope`, dropping
  // the least recently used checkpoints until it fits. The same ids again only refresh it.
  void insert(const std::string& scope, std::span<const int32_t> ids, const Session& state, std::span<const float> logits);

  // The bytes a checkpoint of this state would take (what insert() charges).
  static uint64_t checkpoint_bytes(const Session& state, size_t ids, size_t vocab);

  PromptCacheStats stats() const;

 private:
  void evict_oldest();  // under mu_

  const uint64_t budget_;
  const size_t max_entries_;
  mutable std::mutex mu_;
  std::list<std::shared_ptr<const Checkpoint>> lru_;  // most recently used first
  PromptCacheStats stats_;
};

}  // namespace waste::server
