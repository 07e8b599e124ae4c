#include "compute/constrain/stack_set.h"

#include <algorithm>

#include "shared/util/error.h"

namespace waste::constrain {

namespace {

enum class Check { Ok, Fail, Unknown };

Check check(const Grammar& g, const StepLimits& lim, size_t index, uint32_t s) {
  const uint32_t need = g.need(s);
  if (need == kNeedInfinite) return Check::Fail;
  if (index + need <= lim.headroom) return Check::Ok;
  return lim.approx ? Check::Unknown : Check::Fail;
}

// Adds the closure of `stack` to out.stacks (unsorted): pushes calls, pops complete frames.
void close(const Grammar& g, const StepLimits& lim, std::vector<uint32_t> stack, StackSet& out) {
  std::vector<std::vector<uint32_t>> work;
  std::vector<std::vector<uint32_t>> seen;  // closures are small: a list beats a hash set
  work.push_back(std::move(stack));
  while (!work.empty()) {
    std::vector<uint32_t> st = std::move(work.back());
    work.pop_back();
    if (std::find(seen.begin(), seen.end(), st) != seen.end()) continue;
    require(seen.size() < kMaxStacks, "constrained decoding: the grammar has more than " + std::to_string(kMaxStacks) +
                                          " alternatives open at once");
    seen.push_back(st);
    const uint32_t top = st.back();
    const size_t i = st.size() - 1;
    if (g.has_bytes(top)) out.stacks.push_back(st);
    if (g.final(top)) {
      if (i == 0) {
        out.popped = true;
      } else {
        std::vector<uint32_t> up(st.begin(), st.end() - 1);  // the caller's return state is below
        work.push_back(std::move(up));
      }
    }
    for (const GrammarCall& c : g.calls(top)) {
      const Check a = check(g, lim, i, c.ret), b = check(g, lim, i + 1, c.callee);
      if (a == Check::Ok && b == Check::Ok) {
        std::vector<uint32_t> down = st;
        down.back() = c.ret;
        down.push_back(c.callee);
        work.push_back(std::move(down));
      } else if (a != Check::Fail && b != Check::Fail) {
        out.unknown = true;
      }
    }
  }
}

void canonical(StackSet& s) {
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
  require(s.stacks.size() <= kMaxStacks, "constrained decoding: the grammar has more than " +
                                             std::to_string(kMaxStacks) + " alternatives open at once");
}

}  // namespace

std::string StackSet::key() const {
  std::string k;
  k.reserve(4 + 4 * stacks.size() * 4);
  k.push_back(char(popped | (unknown << 1)));
  for (const auto& st : stacks) {
    const uint32_t n = uint32_t(st.size());
    k.append(reinterpret_cast<const char*>(&n), 4);
    k.append(reinterpret_cast<const char*>(st.data()), 4 * st.size());
  }
  return k;
}

StackSet start_set(const Grammar& g, uint32_t state, const StepLimits& lim) {
  StackSet s;
  if (check(g, lim, 0, state) == Check::Ok) close(g, lim, {state}, s);
  canonical(s);
  return s;
}

void advance(const Grammar& g, const StepLimits& lim, const StackSet& in, uint8_t byte, StackSet& out) {
  out.stacks.clear();
  out.popped = false;
  // Local mode: a byte after a pop of the base frame is read by an unknown caller.
  out.unknown = in.unknown || (lim.local && in.popped && (lim.base_rule == UINT32_MAX || g.may_follow(lim.base_rule, byte)));
  for (const auto& st : in.stacks) {
    const uint32_t to = g.next(st.back(), byte);
    if (to == kNoState) continue;
    const Check c = check(g, lim, st.size() - 1, to);
    if (c == Check::Ok) {
      std::vector<uint32_t> moved = st;
      moved.back() = to;
      close(g, lim, std::move(moved), out);
    } else if (c == Check::Unknown) {
      out.unknown = true;
    }
  }
  canonical(out);
}

}  // namespace waste::constrain
