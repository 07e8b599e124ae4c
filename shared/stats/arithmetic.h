// Sums and differences of statistics structs, statistic by statistic (stat.h): counters add and
// subtract; a gauge is a value now, so a sum or difference keeps the newer operand's (the left
// of minus, the right of plus).
#pragma once
#include <cstdint>

#include "shared/stats/stat.h"

namespace waste::stats {

// to += from, for every statistic of From (To holds at least From's members).
template <class To, class From>
void add(To& to, const From& from) {
  From::each_pair(to, from, [](const Stat& st, auto& t, const auto& f) {
    if (st.kind == Kind::Counter)
      t += f;
    else
      t = f;
  });
}

template <class S>
S plus(S a, const S& b) {
  add(a, b);
  return a;
}

// What happened between two snapshots. A counter that stepped back (a restarted iod, counted
// again from zero) gives 0: never negative work.
template <class S>
S minus(S later, const S& earlier) {
  S::each_pair(later, earlier, [](const Stat& st, auto& l, const auto& e) {
    if (st.kind == Kind::Counter) l = l > e ? l - e : 0;
  });
  return later;
}

// part/whole of each counter (integer division, as a share of a step's traffic is charged);
// a whole of 0 (a step with no rows) charges nothing.
template <class S>
S share(S s, uint64_t part, uint64_t whole) {
  each(s, [&](const Stat& st, auto& v) {
    if (st.kind == Kind::Counter) v = whole ? v * part / whole : 0;
  });
  return s;
}

}  // namespace waste::stats
