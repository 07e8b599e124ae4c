// The runtime's state: the set of parse stacks the bytes so far can be in (a pushdown automaton
// run without backtracking: every alternative is followed at once), and one step of it.
//
// A stack is a list of grammar states, the caller's return states below, the current state on
// top. A set is kept *closed*: every stack's top state reads bytes; calls were pushed and
// complete rules popped already. Two modes share the code:
//  - full: stack[0] is the root frame; popping it means the document is complete (`popped`).
//  - local (mask cache walks): stack[0] is some frame of an unknown stack; popping it means the
//    rest of the bytes would be read by frames we do not know (`popped`, and `unknown` after).
// Depth checks: a frame at index i moves to state s only if i + need(s) <= headroom; `approx`
// says the true headroom may be larger, so a failed check makes the outcome `unknown` rather
// than impossible.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compute/constrain/grammar.h"

namespace waste::constrain {

// Alternatives followed at once. Schemas from the compiler stay far below this; past it a step
// throws (never silently drops an alternative, which would make mask() and allows() disagree).
inline constexpr size_t kMaxStacks = 1024;

struct StepLimits {
  uint32_t headroom = kMaxStackDepth - 1;
  bool approx = false;
  bool local = false;
  // Local mode: the rule of the base frame. A byte after its pop that no caller of that rule
  // could read is impossible, not unknown.
  uint32_t base_rule = UINT32_MAX;
};

struct StackSet {
  std::vector<std::vector<uint32_t>> stacks;  // sorted, unique
  bool popped = false;
  bool unknown = false;

  bool dead() const { return stacks.empty() && !popped && !unknown; }
  // A key identifying the set (for caches).
  std::string key() const;
};

// The closed set of the single stack {state} (its calls and pops taken).
StackSet start_set(const Grammar& g, uint32_t state, const StepLimits& lim);
// The closed set after one byte.
void advance(const Grammar& g, const StepLimits& lim, const StackSet& in, uint8_t byte, StackSet& out);

}  // namespace waste::constrain
