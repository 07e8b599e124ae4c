// waste-bench-cache-policy: replays routing traces through cache policies (no I/O) and prints
// hit rate, Belady's optimum (with bypass, and without: every missed record takes a slot, as in
// iod), the ratio to the former and the cost in ns per access (the whole simulated access: cache
// bookkeeping plus the policy calls, thread CPU time so that other load on a shared machine
// counts less), per cache size in working sets.
//
//   waste-bench-cache-policy [--policy SPEC]... [--working-sets 0.5,1,2,4,8] [--learn-half] TRACE...
//
// --policy all: forecast and every classic baseline (lru, arc, s3fifo, lfu, lfru), then one
// table per trace with the hit rates side by side and forecast's margin over the best baseline.
//
// --learn-half: learn usage counts from the first half of each trace, replay the second half
// seeded (prior + pre-warm) with them, so no hit is scored on data the counts have seen.
#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "iod/cache/simulate.h"
#include "iod/cache/usage_file.h"
#include "shared/util/error.h"

using namespace waste;
using namespace waste::cache;

namespace {

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    require(!item.empty() && end && *end == '\0' && v > 0, "--working-sets: bad number '" + item + "'");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void run(const std::string& path, const std::vector<std::string>& policies, const std::vector<double>& ws,
         bool learn_half, bool table) {
  RoutingTrace trace = read_routing_trace(path);
  CacheGeometry g = trace_geometry(trace);
  KeyPrior prior;
  std::vector<ExpertKey> prewarm;
  if (learn_half) {
    size_t half = trace.tokens() / 2;
    UsageCounts usage = usage_from_trace(trace.slice(0, half), g);
    trace = trace.slice(half, trace.tokens());
    prior = usage.prior(g);
    prewarm = usage.hottest(g.key_count());
  }
  std::printf("%s: %zu tokens%s, %u layers x top-%u, working set %u slots\n", path.c_str(), trace.tokens(),
              learn_half ? " (second half, seeded with counts of the first)" : "", trace.moe_layers, trace.top_k,
              g.working_set_slots());
  std::printf("%-28s %6s %7s %8s %8s %9s %7s %9s\n", "policy", "WS", "slots", "hit", "belady", "no-bypass", "ratio",
              "ns/access");
  for (double w : ws) {
    uint32_t slots = uint32_t(std::max<double>(trace.top_k, std::llround(w * g.working_set_slots())));
    double opt = simulate_belady(trace, g, slots, true, prewarm).hit_rate();
    double opt_pinned = simulate_belady(trace, g, slots, false, prewarm).hit_rate();
    for (const std::string& spec : policies) {
      auto policy = make_policy(spec, g, prior);
      // Best of 3 runs for the time (a shared machine); the hit rate is deterministic.
      double best_ns = 1e300, hit = 0;
      for (int rep = 0; rep < 3; ++rep) {
        double t0 = thread_cpu_ns();
        SimResult r = simulate_policy(trace, g, slots, *policy, prewarm);
        double ns = thread_cpu_ns() - t0;
        best_ns = std::min(best_ns, ns / double(r.accesses));
        hit = r.hit_rate();
      }
      std::printf("%-28s %6g %7u %7.1f%% %7.1f%% %8.1f%% %7.2f %9.0f\n", spec.c_str(), w, slots, 100 * hit, 100 * opt,
                  100 * opt_pinned, opt > 0 ? hit / opt : 0.0, best_ns);
    }
  }
  if (table) {
    std::printf("\n%s: hit rate per policy\n\n%s\n", path.c_str(),
                comparison_table(policies, compare_policies(trace, policies, ws, prior, prewarm)).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> policies, traces;
    std::vector<double> ws = kDefaultWorkingSets;
    bool learn_half = false, table = false;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--policy" && i + 1 < argc && std::string(argv[i + 1]) == "all") {
        ++i;
        table = true;
        for (const std::string& p : comparison_policies()) policies.push_back(p);
      } else if (a == "--policy" && i + 1 < argc) policies.push_back(argv[++i]);
      else if (a == "--working-sets" && i + 1 < argc) ws = parse_list(argv[++i]);
      else if (a == "--learn-half") learn_half = true;
      else if (!a.empty() && a[0] == '-') throw Error("unknown option " + a);
      else traces.push_back(a);
    }
    require(!traces.empty(), "usage: waste-bench-cache-policy [--policy SPEC|all]... [--working-sets L] [--learn-half] TRACE...\n"
                             "  SPEC: " + policy_help() + "\n  all: forecast and every classic baseline, side by side");
    if (policies.empty()) policies = {kDefaultPolicy, "lru"};
    for (const auto& t : traces) run(t, policies, ws, learn_half, table);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waste-bench-cache-policy: %s\n", e.what());
    return 1;
  }
}
