#include "shared/stats/prometheus.h"

#include <cstdio>

namespace waste::stats {

void write_metric(std::string& out, std::string_view name, Kind kind, std::string_view help, double value) {
  // %.17g: counters and byte gauges exactly (a stream's default 6 digits rounded them).
  char v[32];
  std::snprintf(v, sizeof v, "%.17g", value);
  const std::string n(name);
  out += "# HELP " + n + " " + std::string(help) + "\n# TYPE " + n + " " +
         (kind == Kind::Counter ? "counter" : "gauge") + "\n" + n + " " + v + "\n";
}

}  // namespace waste::stats
