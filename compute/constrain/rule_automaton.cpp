#include "compute/constrain/rule_automaton.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "shared/util/error.h"

namespace waste::constrain {

namespace {

// Thompson NFA: epsilon, byte-range and call edges. States are bounded (kMaxNfaStates) so a huge
// repeat count fails with an error instead of exhausting memory.
constexpr uint32_t kMaxNfaStates = 4u << 20;

class Nfa {
 public:
  struct Frag {
    uint32_t in, out;
  };
  struct ByteEdge {
    uint32_t to;
    uint8_t lo, hi;
  };
  struct CallEdge {
    uint32_t to, rule;
  };

  explicit Nfa(const std::string& what) : what_(what) {}

  uint32_t add() {
    require(eps.size() < kMaxNfaStates, what_ + ": the schema is too large (more than " +
                                            std::to_string(kMaxNfaStates) + " automaton states)");
    eps.emplace_back();
    bytes.emplace_back();
    calls.emplace_back();
    return uint32_t(eps.size() - 1);
  }
  void link(uint32_t a, uint32_t b) { eps[a].push_back(b); }

  Frag build(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Empty: {
        const uint32_t s = add();
        return {s, s};
      }
      case Expr::Kind::Nothing: {
        const uint32_t a = add(), b = add();
        return {a, b};
      }
      case Expr::Kind::Bytes: {
        const uint32_t a = add(), b = add();
        for (const ByteRange& r : e.ranges) bytes[a].push_back({b, r.lo, r.hi});
        return {a, b};
      }
      case Expr::Kind::Seq: {
        Frag f = build(*e.items[0]);
        for (size_t i = 1; i < e.items.size(); ++i) {
          const Frag g = build(*e.items[i]);
          link(f.out, g.in);
          f.out = g.out;
        }
        return f;
      }
      case Expr::Kind::Alt: {
        const uint32_t a = add(), b = add();
        for (const ExprPtr& i : e.items) {
          const Frag g = build(*i);
          link(a, g.in);
          link(g.out, b);
        }
        return {a, b};
      }
      case Expr::Kind::Repeat: return repeat(*e.items[0], e.min, e.max);
      case Expr::Kind::Call: {
        const uint32_t a = add(), b = add();
        calls[a].push_back({b, e.rule});
        return {a, b};
      }
      case Expr::Kind::Object: return object(e);
    }
    throw Error(what_ + ": internal error: unknown expression");
  }

  std::vector<std::vector<uint32_t>> eps;
  std::vector<std::vector<ByteEdge>> bytes;
  std::vector<std::vector<CallEdge>> calls;

 private:
  Frag repeat(const Expr& x, uint32_t min, uint32_t max) {
    const uint32_t in = add();
    uint32_t cur = in;
    for (uint32_t i = 0; i < min; ++i) {
      const Frag g = build(x);
      link(cur, g.in);
      cur = g.out;
    }
    if (max == kUnbounded) {
      // One more copy looping back: x* after the required copies.
      const Frag g = build(x);
      link(cur, g.in);
      link(g.out, cur);
      return {in, cur};
    }
    const uint32_t out = add();
    link(cur, out);
    for (uint32_t i = min; i < max; ++i) {
      const Frag g = build(x);
      link(cur, g.in);
      cur = g.out;
      link(cur, out);
    }
    return {in, out};
  }

  // "{" ws, then the fields in order: after field i (or the start) any later field may follow
  // as long as no required field is skipped, "}" only once no required field remains.
  Frag object(const Expr& e) {
    const size_t n = e.fields.size();
    const uint32_t in = add(), open = add(), fin = add();
    bytes[in].push_back({open, '{', '{'});
    const Frag w0 = build(*e.ws);
    link(open, w0.in);
    std::vector<uint32_t> entry(n), exit(n);
    for (size_t j = 0; j < n; ++j) {
      const Frag key = build(*e_literal(e.fields[j].key));
      const Frag w1 = build(*e.ws);
      const uint32_t colon = add();
      const Frag w2 = build(*e.ws);
      const Frag v = build(*e.fields[j].value);
      link(key.out, w1.in);
      bytes[w1.out].push_back({colon, ':', ':'});
      link(colon, w2.in);
      link(w2.out, v.in);
      entry[j] = key.in;
      exit[j] = v.out;
    }
    // next_required[i]: the first required field at index >= i (n: none).
    std::vector<size_t> next_required(n + 1, n);
    for (size_t i = n; i-- > 0;) next_required[i] = e.fields[i].required ? i : next_required[i + 1];
    // Fields that may come first / after field i: up to and including the next required one.
    auto eligible_after = [&](size_t first, uint32_t from) {
      const size_t last = std::min(next_required[first], n - 1);
      for (size_t j = first; j <= last && j < n; ++j) link(from, entry[j]);
    };
    if (n > 0) eligible_after(0, w0.out);
    if (next_required[0] == n) bytes[w0.out].push_back({fin, '}', '}'});
    for (size_t i = 0; i < n; ++i) {
      const Frag w = build(*e.ws);
      link(exit[i], w.in);
      if (next_required[i + 1] == n) bytes[w.out].push_back({fin, '}', '}'});
      if (i + 1 < n) {
        const uint32_t comma = add();
        bytes[w.out].push_back({comma, ',', ','});
        const Frag w2 = build(*e.ws);
        link(comma, w2.in);
        eligible_after(i + 1, w2.out);
      }
    }
    return {in, fin};
  }

  const std::string& what_;
};

struct VecHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return size_t(h);
  }
};

class Determinizer {
 public:
  Determinizer(const Nfa& nfa, uint32_t max_states, const std::string& what)
      : nfa_(nfa), max_states_(max_states), what_(what), mark_(nfa.eps.size(), 0) {}

  RuleAutomaton run(uint32_t start, uint32_t final) {
    final_ = final;
    RuleAutomaton out;
    intern(closure({start}));
    for (size_t k = 0; k < sets_.size(); ++k) {
      const std::vector<uint32_t> set = sets_[k];  // copy: intern() grows sets_
      RuleAutomaton::State st;
      st.final = std::binary_search(set.begin(), set.end(), final);
      bytes_of(set, st);
      calls_of(set, st);
      out.states.push_back(std::move(st));
    }
    return out;
  }

 private:
  std::vector<uint32_t> closure(std::vector<uint32_t> seeds) {
    ++stamp_;
    std::vector<uint32_t> out, work = std::move(seeds);
    while (!work.empty()) {
      const uint32_t s = work.back();
      work.pop_back();
      if (mark_[s] == stamp_) continue;
      mark_[s] = stamp_;
      // Keep only states that do something (edges out, or the final state): smaller sets,
      // and sets that differ only in pass-through or dead states become one DFA state.
      if (!nfa_.bytes[s].empty() || !nfa_.calls[s].empty() || s == final_) out.push_back(s);
      for (uint32_t t : nfa_.eps[s]) work.push_back(t);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  uint32_t intern(std::vector<uint32_t> set) {
    auto it = ids_.find(set);
    if (it != ids_.end()) return it->second;
    require(sets_.size() < max_states_, what_ + ": the schema is too large (more than " +
                                             std::to_string(max_states_) + " automaton states)");
    const uint32_t id = uint32_t(sets_.size());
    ids_.emplace(set, id);
    sets_.push_back(std::move(set));
    return id;
  }

  void bytes_of(const std::vector<uint32_t>& set, RuleAutomaton::State& st) {
    std::vector<Nfa::ByteEdge> edges;
    for (uint32_t s : set) edges.insert(edges.end(), nfa_.bytes[s].begin(), nfa_.bytes[s].end());
    if (edges.empty()) return;
    // Elementary intervals: every byte inside one has the same set of targets.
    std::vector<uint32_t> cuts;
    for (const auto& e : edges) {
      cuts.push_back(e.lo);
      cuts.push_back(uint32_t(e.hi) + 1);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const uint32_t lo = cuts[c], hi = cuts[c + 1] - 1;
      std::vector<uint32_t> targets;
      for (const auto& e : edges)
        if (e.lo <= lo && e.hi >= hi) targets.push_back(e.to);
      if (targets.empty()) continue;
      std::vector<uint32_t> next = closure(std::move(targets));
      if (next.empty()) continue;  // only dead states: no edge
      const uint32_t to = intern(std::move(next));
      if (!st.edges.empty() && st.edges.back().to == to && uint32_t(st.edges.back().hi) + 1 == lo)
        st.edges.back().hi = uint8_t(hi);
      else
        st.edges.push_back({uint8_t(lo), uint8_t(hi), to});
    }
  }

  void calls_of(const std::vector<uint32_t>& set, RuleAutomaton::State& st) {
    std::map<uint32_t, std::vector<uint32_t>> by_rule;
    for (uint32_t s : set)
      for (const auto& c : nfa_.calls[s]) by_rule[c.rule].push_back(c.to);
    for (auto& [rule, targets] : by_rule) {
      std::vector<uint32_t> next = closure(std::move(targets));
      if (!next.empty()) st.calls.push_back({rule, intern(std::move(next))});
    }
  }

  const Nfa& nfa_;
  const uint32_t max_states_;
  const std::string& what_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  uint32_t final_ = 0;
  std::unordered_map<std::vector<uint32_t>, uint32_t, VecHash> ids_;
  std::vector<std::vector<uint32_t>> sets_;
};

}  // namespace

RuleAutomaton build_rule_automaton(const Expr& body, uint32_t max_states, const std::string& what) {
  Nfa nfa(what);
  const Nfa::Frag f = nfa.build(body);
  return Determinizer(nfa, max_states, what).run(f.in, f.out);
}

}  // namespace waste::constrain
