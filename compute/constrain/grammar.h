// A compiled grammar: one deterministic byte automaton per rule, whose edges may call another
// rule (a pushdown automaton; nesting lives on the parse stack). Immutable once built and shared
// by every matcher of every request that uses it; the only mutable part is the registry of mask
// caches (one per token vocabulary, thread-safe), which never changes what the grammar accepts.
//
// Depth: a parse stack holds at most kMaxStackDepth frames. need(s) is the least number of
// frames that completing the rule from state s still pushes (0: it can finish without a call).
// The runtime moves to a state only if depth + need fits kMaxStackDepth, so every reachable
// state can still complete: a matcher never gets stuck, whatever tokens were sampled.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "compute/constrain/expr.h"

namespace waste::constrain {

class MaskCache;
class TokenVocabulary;

inline constexpr uint32_t kMaxStackDepth = 64;
inline constexpr uint8_t kNeedInfinite = 255;
inline constexpr uint32_t kNoState = UINT32_MAX;
// Bounds on one grammar (errors past them name the schema).
inline constexpr uint32_t kMaxRules = 8192;
inline constexpr uint32_t kMaxGrammarStates = 1u << 20;

struct GrammarCall {
  uint32_t callee;  // the called rule's start state
  uint32_t ret;     // the caller's state once the callee is complete
};

struct GrammarStats {
  uint32_t rules = 0, states = 0, edges = 0, calls = 0, byte_classes = 0;
};

class Grammar {
 public:
  // Storage layout (filled by GrammarBuilder): a state's edges are sorted and disjoint.
  struct Edge {
    uint8_t lo, hi;
    uint32_t to;
  };
  struct State {
    uint32_t edge_begin = 0, call_begin = 0;
    uint16_t n_edges = 0, n_calls = 0;
    uint8_t need = kNeedInfinite;
    bool final = false;
  };

  uint32_t root() const { return root_; }
  uint32_t state_count() const { return uint32_t(states_.size()); }
  bool final(uint32_t s) const { return states_[s].final; }
  uint8_t need(uint32_t s) const { return states_[s].need; }
  bool has_bytes(uint32_t s) const { return states_[s].n_edges != 0; }
  // The state after byte b, or kNoState.
  uint32_t next(uint32_t s, uint8_t b) const {
    const State& st = states_[s];
    for (uint32_t i = st.edge_begin, e = st.edge_begin + st.n_edges; i < e; ++i) {
      if (b < edges_[i].lo) return kNoState;
      if (b <= edges_[i].hi) return edges_[i].to;
    }
    return kNoState;
  }
  std::span<const GrammarCall> calls(uint32_t s) const {
    return {calls_.data() + states_[s].call_begin, states_[s].n_calls};
  }

  // The rule a state belongs to, and the bytes that may come right after that rule completes,
  // in any caller (so a mask-cache walk that completes its top frame can still reject a token
  // whose next byte no caller could read).
  uint32_t rule_of(uint32_t s) const { return rule_of_[s]; }
  bool may_follow(uint32_t rule, uint8_t b) const { return (follow_[rule][b >> 6] >> (b & 63)) & 1; }
  // Rules followed by most bytes (a string's multi-byte character, called inside the string):
  // a walk that starts in one also takes its caller's frame, else nearly every token would
  // complete the rule and depend on the caller.
  bool wide_follow(uint32_t rule) const { return wide_follow_[rule]; }

  // Bytes that every edge treats alike share a class (a walk memoises per class, not per byte).
  uint32_t class_count() const { return n_classes_; }
  uint8_t byte_class(uint8_t b) const { return class_of_[b]; }
  uint8_t class_byte(uint32_t c) const { return class_byte_[c]; }

  const GrammarStats& stats() const { return stats_; }
  const std::string& where() const { return where_; }

  // The mask cache of this grammar over vocabulary v, created on first use (thread-safe).
  std::shared_ptr<MaskCache> mask_cache(const std::shared_ptr<const TokenVocabulary>& v) const;

 private:
  friend class GrammarBuilder;
  std::vector<State> states_;
  std::vector<Edge> edges_;
  std::vector<GrammarCall> calls_;
  std::vector<uint32_t> rule_of_;
  std::vector<std::array<uint64_t, 4>> follow_;
  std::vector<uint8_t> wide_follow_;
  uint32_t root_ = 0;
  uint32_t n_classes_ = 0;
  uint8_t class_of_[256] = {};
  uint8_t class_byte_[256] = {};
  GrammarStats stats_;
  std::string where_;

  mutable std::mutex caches_mutex_;
  mutable std::vector<std::pair<std::weak_ptr<const TokenVocabulary>, std::shared_ptr<MaskCache>>> caches_;
};

// Rules are declared first (so they can call each other, recursively) and defined later.
class GrammarBuilder {
 public:
  // `where` prefixes every error (e.g. "response_format.json_schema.schema").
  explicit GrammarBuilder(std::string where) : where_(std::move(where)) {}
  uint32_t declare_rule(std::string name);
  bool defined(uint32_t rule) const { return rule < rules_.size() && rules_[rule].defined; }
  void define_rule(uint32_t rule, const ExprPtr& body);
  // Links the rules, computes need(), drops what cannot complete, checks the root.
  std::shared_ptr<const Grammar> finish(uint32_t root_rule);

 private:
  struct Rule {
    std::string name;
    bool defined = false;
    std::vector<Grammar::State> states;  // local indices
    std::vector<Grammar::Edge> edges;
    std::vector<GrammarCall> calls;      // callee = rule id, ret = local state
  };
  std::string where_;
  std::vector<Rule> rules_;
  uint64_t total_states_ = 0;
};

}  // namespace waste::constrain
