// Per-state token sets of one grammar over one vocabulary, computed on first use and shared by
// every matcher of the grammar (thread-safe).
//
// For a parse stack whose top state is s, most tokens are decided by s alone: they are read
// entirely inside the top frame and frames they push themselves ("context-independent"). Only
// tokens whose bytes go on after the top frame completes depend on the frames below; they are
// listed as `uncertain` and the matcher checks them against its real stacks. The entry for s is
// found by walking the vocabulary trie with s, skipping every subtree whose prefix is dead, and
// memoising the walk's steps in a lazy DFA over local stack sets (JSON revisits the same few
// states: inside a string, after a comma, ...).
//
// Keys are (frames, headroom): the top frame, plus the frames below it while their rule is
// wide_follow() (at most kMaxKeyFrames), and headroom = min(kMaxStackDepth - depth of the lowest
// key frame, kHeadroomCap): far from the depth limit the entry is the same at any depth (a walk
// that would need more is `uncertain`).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "compute/constrain/stack_set.h"

namespace waste::constrain {

class Grammar;
class TokenVocabulary;

inline constexpr uint32_t kHeadroomCap = 32;
inline constexpr size_t kMaxKeyFrames = 4;
// Memory bounds: entries beyond this many bytes are dropped (matchers keep theirs alive), and
// the walks' memos are reset between walks once they hold this many states together.
inline constexpr size_t kMaxCacheBytes = 64ull << 20;
inline constexpr size_t kMaxMemoStates = 1u << 16;

struct TokenSetEntry {
  // Tokens allowed whatever the frames below: a bitset over ids when many, else a list.
  std::vector<uint64_t> accepted_bits;
  std::vector<uint32_t> accepted;
  // Tokens that depend on the frames below, in trie order.
  std::vector<uint32_t> uncertain;
  size_t bytes() const { return 8 * accepted_bits.size() + 4 * (accepted.size() + uncertain.size()) + 64; }
};

struct MaskCacheStats {
  uint64_t hits = 0, misses = 0, walk_nodes = 0, memo_states = 0;
  double walk_seconds = 0;
};

class MaskCache {
 public:
  // frames: the key frames of a stack, lowest first (the top last).
  std::shared_ptr<const TokenSetEntry> entry(const Grammar& g, const TokenVocabulary& v,
                                             std::span<const uint32_t> frames, uint32_t headroom);
  MaskCacheStats stats() const;

 private:
  // Lazy DFA over closed local stack sets; transitions per byte class, computed on first use,
  // in one flat table (the walk's inner loop is one load per trie node).
  struct Memo {
    uint32_t n_classes = 0;
    std::vector<StackSet> sets;
    std::vector<int32_t> next;   // [state * n_classes + class]: -2 not computed, -1 dead
    std::vector<uint8_t> open;   // per state: 1 = tokens ending here are accepted, 0 = only `unknown`
    std::unordered_map<std::string, int32_t> index;
    int32_t intern(StackSet&& s);
    int32_t step(const Grammar& g, const StepLimits& lim, int32_t from, uint8_t byte) {
      const uint32_t c = g.byte_class(byte);
      const int32_t known = next[size_t(from) * n_classes + c];
      return known != -2 ? known : compute(g, lim, from, c);
    }
    int32_t compute(const Grammar& g, const StepLimits& lim, int32_t from, uint32_t c);
  };
  std::shared_ptr<const TokenSetEntry> walk(const Grammar& g, const TokenVocabulary& v,
                                            std::span<const uint32_t> frames, uint32_t headroom);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const TokenSetEntry>> entries_;
  std::unordered_map<uint64_t, Memo> memo_;  // per (base rule, headroom)
  size_t bytes_ = 0;
  MaskCacheStats stats_;
};

}  // namespace waste::constrain
