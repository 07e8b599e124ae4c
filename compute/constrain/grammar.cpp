#include "compute/constrain/grammar.h"

#include <algorithm>

#include "compute/constrain/mask_cache.h"
#include "compute/constrain/rule_automaton.h"
#include "shared/util/error.h"

namespace waste::constrain {

std::shared_ptr<MaskCache> Grammar::mask_cache(const std::shared_ptr<const TokenVocabulary>& v) const {
  std::lock_guard<std::mutex> lock(caches_mutex_);
  // Drop the caches of vocabularies that no longer exist (their memory goes with them).
  std::erase_if(caches_, [](const auto& e) { return e.first.expired(); });
  for (const auto& e : caches_)
    if (e.first.lock() == v) return e.second;
  caches_.emplace_back(v, std::make_shared<MaskCache>());
  return caches_.back().second;
}

uint32_t GrammarBuilder::declare_rule(std::string name) {
  require(rules_.size() < kMaxRules, where_ + ": the schema is too large (more than " + std::to_string(kMaxRules) +
                                         " grammar rules)");
  rules_.emplace_back();
  rules_.back().name = std::move(name);
  return uint32_t(rules_.size() - 1);
}

void GrammarBuilder::define_rule(uint32_t rule, const ExprPtr& body) {
  require(rule < rules_.size() && !rules_[rule].defined, where_ + ": internal error: rule defined twice");
  const uint64_t left = kMaxGrammarStates - std::min<uint64_t>(total_states_, kMaxGrammarStates);
  const RuleAutomaton a = build_rule_automaton(*body, uint32_t(std::max<uint64_t>(left, 1)), where_);
  Rule& r = rules_[rule];
  r.defined = true;
  for (const RuleAutomaton::State& s : a.states) {
    Grammar::State st;
    st.final = s.final;
    st.edge_begin = uint32_t(r.edges.size());
    st.call_begin = uint32_t(r.calls.size());
    require(s.calls.size() < 65536, where_ + ": the schema is too large (a state with 65536 calls)");
    st.n_edges = uint16_t(s.edges.size());
    st.n_calls = uint16_t(s.calls.size());
    for (const auto& e : s.edges) r.edges.push_back({e.lo, e.hi, e.to});
    for (const auto& c : s.calls) r.calls.push_back({c.rule, c.to});
    r.states.push_back(st);
  }
  total_states_ += a.states.size();
}

namespace {

// need() by levels: at level v, a state has need <= v if it reaches a final state over byte
// edges and calls whose callee has need <= v - 1 (that call pushes one frame more).
void compute_need(std::vector<Grammar::State>& st, const std::vector<Grammar::Edge>& edges,
                  const std::vector<GrammarCall>& calls) {
  const size_t n = st.size();
  std::vector<std::vector<uint32_t>> rev_byte(n);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> rev_call(n);  // ret -> (caller, callee)
  for (uint32_t s = 0; s < n; ++s) {
    for (uint32_t i = 0; i < st[s].n_edges; ++i) rev_byte[edges[st[s].edge_begin + i].to].push_back(s);
    for (uint32_t i = 0; i < st[s].n_calls; ++i) {
      const GrammarCall& c = calls[st[s].call_begin + i];
      rev_call[c.ret].push_back({s, c.callee});
    }
  }
  for (uint32_t s = 0; s < n; ++s) st[s].need = st[s].final ? 0 : kNeedInfinite;
  for (uint32_t v = 0; v < kMaxStackDepth; ++v) {
    std::vector<uint32_t> work;
    for (uint32_t s = 0; s < n; ++s)
      if (st[s].need != kNeedInfinite) work.push_back(s);
    size_t added = 0;
    while (!work.empty()) {
      const uint32_t s = work.back();
      work.pop_back();
      for (uint32_t from : rev_byte[s])
        if (st[from].need == kNeedInfinite) {
          st[from].need = uint8_t(v);
          work.push_back(from);
          ++added;
        }
      for (auto [from, callee] : rev_call[s])
        if (st[from].need == kNeedInfinite && st[callee].need != kNeedInfinite && st[callee].need + 1u <= v) {
          st[from].need = uint8_t(v);
          work.push_back(from);
          ++added;
        }
    }
    if (added == 0 && v > 0) break;  // nothing new: no new call became usable either
  }
}

using ByteSet = std::array<uint64_t, 4>;

// More following bytes than this: wide_follow() (JSON's structural followers are about 8).
constexpr int kWideFollowBytes = 64;

bool merge(ByteSet& into, const ByteSet& from) {
  bool changed = false;
  for (int w = 0; w < 4; ++w) {
    changed |= (into[w] | from[w]) != into[w];
    into[w] |= from[w];
  }
  return changed;
}

// FOLLOW(rule): bytes some caller can read right after the rule completes. FIRST(rule): bytes
// its start state can read (rules never match the empty string, so calls at the start add
// their callee's FIRST and nothing more). Both by iteration to a fixpoint.
std::vector<ByteSet> compute_follow(const std::vector<Grammar::State>& st, const std::vector<Grammar::Edge>& edges,
                                    const std::vector<GrammarCall>& calls, const std::vector<uint32_t>& rule_of,
                                    const std::vector<uint32_t>& starts) {
  const size_t n_rules = starts.size();
  auto own_bytes = [&](uint32_t s) {
    ByteSet b{};
    for (uint32_t i = 0; i < st[s].n_edges; ++i) {
      const Grammar::Edge& e = edges[st[s].edge_begin + i];
      for (uint32_t c = e.lo; c <= e.hi; ++c) b[c >> 6] |= 1ull << (c & 63);
    }
    return b;
  };
  std::vector<ByteSet> first(n_rules), follow(n_rules);
  for (size_t r = 0; r < n_rules; ++r) first[r] = own_bytes(starts[r]);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      const Grammar::State& s = st[starts[r]];
      for (uint32_t i = 0; i < s.n_calls; ++i) changed |= merge(first[r], first[rule_of[calls[s.call_begin + i].callee]]);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t s = 0; s < st.size(); ++s)
      for (uint32_t i = 0; i < st[s].n_calls; ++i) {
        const GrammarCall& c = calls[st[s].call_begin + i];
        ByteSet after = own_bytes(c.ret);
        for (uint32_t k = 0; k < st[c.ret].n_calls; ++k) merge(after, first[rule_of[calls[st[c.ret].call_begin + k].callee]]);
        if (st[c.ret].final) merge(after, follow[rule_of[c.ret]]);
        changed |= merge(follow[rule_of[c.callee]], after);
      }
  }
  return follow;
}

}  // namespace

std::shared_ptr<const Grammar> GrammarBuilder::finish(uint32_t root_rule) {
  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->where_ = where_;
  std::vector<uint32_t> offset(rules_.size());
  uint32_t total = 0;
  for (size_t r = 0; r < rules_.size(); ++r) {
    require(rules_[r].defined, where_ + ": internal error: rule " + rules_[r].name + " never defined");
    offset[r] = total;
    total += uint32_t(rules_[r].states.size());
  }
  require(root_rule < rules_.size(), where_ + ": internal error: no root rule");
  // Global ids: rule r's local state q is offset[r] + q; a callee is its rule's start state.
  std::vector<Grammar::State> st;
  std::vector<Grammar::Edge> edges;
  std::vector<GrammarCall> calls;
  for (size_t r = 0; r < rules_.size(); ++r) {
    const Rule& rule = rules_[r];
    for (const Grammar::State& s : rule.states) {
      Grammar::State x = s;
      x.edge_begin = uint32_t(edges.size());
      x.call_begin = uint32_t(calls.size());
      for (uint32_t i = 0; i < s.n_edges; ++i) {
        Grammar::Edge e = rule.edges[s.edge_begin + i];
        e.to += offset[r];
        edges.push_back(e);
      }
      for (uint32_t i = 0; i < s.n_calls; ++i) {
        const GrammarCall& c = rule.calls[s.call_begin + i];
        calls.push_back({offset[c.callee], c.ret + offset[r]});
      }
      st.push_back(x);
    }
  }
  // A callee matching the empty string would let the parse stack grow without input.
  for (size_t r = 0; r < rules_.size(); ++r)
    require(!rules_[r].states[0].final, where_ + ": internal error: rule " + rules_[r].name + " matches nothing");
  // Left recursion (a rule that can call itself before reading a byte) would only be stopped
  // by the depth limit; a schema like {"$ref": "#"} at the top of itself is an error.
  {
    std::vector<int> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, uint32_t>> path;  // (rule, next call index)
    for (uint32_t r0 = 0; r0 < rules_.size(); ++r0) {
      if (color[r0]) continue;
      path.push_back({r0, 0});
      color[r0] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        const Grammar::State& s = rules_[r].states[0];
        if (i < s.n_calls) {
          const uint32_t callee = rules_[r].calls[s.call_begin + i++].callee;
          require(color[callee] != 1, where_ + ": recursive reference to " + rules_[callee].name +
                                          " without an enclosing object or array (left recursion)");
          if (color[callee] == 0) {
            color[callee] = 1;
            path.push_back({callee, 0});
          }
        } else {
          color[r] = 2;
          path.pop_back();
        }
      }
    }
  }
  compute_need(st, edges, calls);
  // Drop edges and calls into states that cannot complete (unsatisfiable parts of the schema).
  {
    std::vector<Grammar::Edge> e2;
    std::vector<GrammarCall> c2;
    for (Grammar::State& s : st) {
      const uint32_t eb = uint32_t(e2.size()), cb = uint32_t(c2.size());
      for (uint32_t i = 0; i < s.n_edges; ++i)
        if (st[edges[s.edge_begin + i].to].need != kNeedInfinite) e2.push_back(edges[s.edge_begin + i]);
      for (uint32_t i = 0; i < s.n_calls; ++i) {
        const GrammarCall& c = calls[s.call_begin + i];
        if (st[c.callee].need != kNeedInfinite && st[c.ret].need != kNeedInfinite) c2.push_back(c);
      }
      s.edge_begin = eb;
      s.call_begin = cb;
      s.n_edges = uint16_t(e2.size() - eb);
      s.n_calls = uint16_t(c2.size() - cb);
    }
    edges = std::move(e2);
    calls = std::move(c2);
  }
  std::vector<uint32_t> rule_of(st.size());
  for (size_t r = 0; r < rules_.size(); ++r)
    for (uint32_t q = 0; q < rules_[r].states.size(); ++q) rule_of[offset[r] + q] = uint32_t(r);
  g->follow_ = compute_follow(st, edges, calls, rule_of, offset);
  for (const ByteSet& f : g->follow_) {
    int n = 0;
    for (uint64_t w : f) n += __builtin_popcountll(w);
    g->wide_follow_.push_back(n > kWideFollowBytes);
  }
  g->rule_of_ = std::move(rule_of);
  const uint32_t root = offset[root_rule];
  require(st[root].need != kNeedInfinite,
          where_ + ": the schema admits no JSON value (e.g. a required property whose schema is false)");
  require(st[root].need < kMaxStackDepth, where_ + ": the schema needs more than " + std::to_string(kMaxStackDepth) +
                                              " levels of nesting");
  // Byte classes: the cut points of every edge split 0..255 into intervals treated alike.
  bool cut[257] = {};
  cut[0] = cut[256] = true;
  for (const Grammar::Edge& e : edges) {
    cut[e.lo] = true;
    cut[uint32_t(e.hi) + 1] = true;
  }
  uint32_t cls = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    if (cut[b] && b > 0) ++cls;
    g->class_of_[b] = uint8_t(cls);
    if (cut[b]) g->class_byte_[cls] = uint8_t(b);
  }
  g->n_classes_ = cls + 1;
  g->states_ = std::move(st);
  g->edges_ = std::move(edges);
  g->calls_ = std::move(calls);
  g->root_ = root;
  g->stats_ = {uint32_t(rules_.size()), uint32_t(g->states_.size()), uint32_t(g->edges_.size()),
               uint32_t(g->calls_.size()), g->n_classes_};
  return g;
}

}  // namespace waste::constrain
