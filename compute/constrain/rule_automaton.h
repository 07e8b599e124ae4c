// One grammar rule's expression -> a deterministic automaton over bytes whose edges may also
// call another rule (Thompson construction, then subset construction). Determinising each rule
// keeps the runtime's parse-stack sets small: alternatives that share a prefix (enum values,
// optional properties, anyOf branches) stay one state until their bytes differ.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compute/constrain/expr.h"

namespace waste::constrain {

struct RuleAutomaton {
  struct Edge {
    uint8_t lo, hi;  // inclusive; a state's edges are disjoint and sorted
    uint32_t to;
  };
  struct Call {
    uint32_t rule;  // the rule called
    uint32_t to;    // this rule's state once the callee is complete
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<Call> calls;
    bool final = false;
  };
  std::vector<State> states;  // states[0] is the start
};

// Throws Error naming `what` when the automaton would exceed max_states (the schema is too large).
RuleAutomaton build_rule_automaton(const Expr& body, uint32_t max_states, const std::string& what);

}  // namespace waste::constrain
