// One definition of each statistic. A group of statistics is an X-macro list, one line a
// statistic:
//
//   X(type, member, "capnpField", "/json/pointer", Counter|Gauge, "unit", "prometheus_name", divisor, "Help.")
//
// and, for a group held inside another (flattened into the same Cap'n Proto struct, JSON
// object and exposition), G(GroupType, member). A struct gets its fields and its visitors from
// its list with WASTE_STATS(LIST); the arithmetic (arithmetic.h), the JSON (json.h), the Cap'n
// Proto copy (capnp.h) and the Prometheus text (prometheus.h) all walk those visitors, so a new
// statistic is one new line (and its Cap'n Proto field, which tests/unit/stats checks is there).
#pragma once
#include <string_view>
#include <type_traits>

namespace waste::stats {

enum class Kind {
  Counter,  // only grows (until its process restarts); Prometheus names end in _total
  Gauge,    // a value now: may go up and down
};

struct Stat {
  std::string_view name;    // the C++ member
  std::string_view field;   // the Cap'n Proto field
  std::string_view json;    // JSON pointer of the value in the JSON the client libraries give
  Kind kind;
  std::string_view unit;
  std::string_view metric;  // the Prometheus name; "" when /metrics does not show it
  double divisor;           // the Prometheus value is the value / divisor (bytes shown as GB)
  std::string_view help;    // Prometheus HELP text
};

}  // namespace waste::stats

#define WASTE_STAT_FIELD_(type, name, ...) type name = 0;
#define WASTE_STAT_GROUP_FIELD_(type, name) type name;
#define WASTE_STAT_VISIT_(type, name, field, json, kind, unit, metric, divisor, help)                                 \
  f(::waste::stats::Stat{#name, field, json, ::waste::stats::Kind::kind, unit, metric, divisor, help}, a.name,        \
    b.name);
#define WASTE_STAT_GROUP_VISIT_(type, name) type::each_pair(a.name, b.name, f);

// Inside a struct: its fields from LIST, and each_pair(a, b, f), which calls
// f(const Stat&, a.member, b.member) for every statistic of LIST (groups included, flattened);
// a and b may be of different types that both hold LIST's members (e.g. one const).
#define WASTE_STATS(LIST)                                        \
  LIST(WASTE_STAT_FIELD_, WASTE_STAT_GROUP_FIELD_)               \
  template <class A, class B, class F>                           \
  static void each_pair(A& a, B& b, F&& f) {                     \
    LIST(WASTE_STAT_VISIT_, WASTE_STAT_GROUP_VISIT_)             \
  }

namespace waste::stats {

// f(const Stat&, s.member) for every statistic of S.
template <class S, class F>
void each(S& s, F&& f) {
  std::remove_const_t<S>::each_pair(s, s, [&](const Stat& st, auto& v, auto&) { f(st, v); });
}

// The descriptors of S's statistics alone, in list order.
template <class S, class F>
void describe(F&& f) {
  S s;
  each(s, [&](const Stat& st, auto&) { f(st); });
}

}  // namespace waste::stats
