// The Prometheus text exposition (version 0.0.4) of statistics structs (stat.h): every
// statistic with a metric name, as its # HELP, # TYPE and value lines.
#pragma once
#include <string>
#include <string_view>

#include "shared/stats/stat.h"

namespace waste::stats {

// One metric's three lines. The value is printed %.17g: counters and byte gauges exactly.
void write_metric(std::string& out, std::string_view name, Kind kind, std::string_view help, double value);

template <class S>
void write_metrics(std::string& out, const S& s) {
  each(s, [&](const Stat& st, const auto& v) {
    if (!st.metric.empty()) write_metric(out, st.metric, st.kind, st.help, double(v) / st.divisor);
  });
}

}  // namespace waste::stats
