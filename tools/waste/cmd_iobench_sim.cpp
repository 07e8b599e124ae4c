// `waste iobench --trace T --simulate`: replays a routing trace through an expert-cache policy
// without any I/O and prints its hit rate next to Belady's optimum at several cache sizes
// (multiples of one token's working set). The I/O replay through iod lands with the daemon.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "iod/cache/simulate.h"
#include "iod/cache/usage_file.h"
#include "shared/util/error.h"
#include "tools/iobench/replay.h"
#include "tools/waste/commands.h"

namespace waste::cli {

// A sweep's or a comparison's rows as JSON: the same keys for both (a comparison's hit_rate is
// one value per policy, in the order of "policies").
template <class Row>
nlohmann::json rows_json(const std::vector<Row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows)
    out.push_back({{"working_sets", r.working_sets}, {"slots", r.slots}, {"hit_rate", r.hit_rate},
                   {"optimal_hit_rate", r.optimal_hit_rate},
                   {"optimal_no_bypass_hit_rate", r.optimal_no_bypass_hit_rate}});
  return out;
}


namespace {

struct IobenchOptions {
  std::string trace, policy = cache::kDefaultPolicy, usage, write_usage;
  bool simulate = false, json = false;
  std::vector<double> working_sets = cache::kDefaultWorkingSets;
  uint32_t experts = 0;
  size_t learn_tokens = 0;
  iobench::ReplayOptions replay;  // without --simulate
  std::string read_records;       // --read-records FILE
  uint64_t timed_last = 0;
};

void run_iobench(const IobenchOptions& o) {
  // (Options --read-records does not use are refused with it by CLI11: register_iobench_command.)
  if (!o.read_records.empty()) return iobench::run_read_records(o.replay, o.read_records, o.timed_last, o.json);
  if (!o.simulate) return iobench::run_replay(o.replay, o.trace, o.policy, o.json);  // tools/iobench
  require(!o.trace.empty(), "iobench --simulate: --trace FILE is required");
  cache::RoutingTrace trace = cache::read_routing_trace(o.trace);
  cache::CacheGeometry g = cache::trace_geometry(trace, o.experts);

  // The hotlist: counts from a usage file, or learned from the first --learn-tokens tokens of
  // the trace (those tokens are then left out of the replay, so nothing is scored on data the
  // counts have seen).
  cache::UsageCounts usage;
  bool have_usage = false;
  if (!o.usage.empty()) {
    usage = cache::read_usage_file(o.usage);
    require(usage.matches(g), o.usage + ": usage counts are for a different shape than " + o.trace);
    have_usage = true;
  }
  if (o.learn_tokens > 0) {
    require(o.learn_tokens < trace.tokens(), "iobench: --learn-tokens must leave tokens to replay");
    usage = cache::usage_from_trace(trace.slice(0, o.learn_tokens), g);
    trace = trace.slice(o.learn_tokens, trace.tokens());
    have_usage = true;
  }
  if (!o.write_usage.empty()) {
    cache::write_usage_file(o.write_usage, have_usage ? usage : cache::usage_from_trace(trace, g));
  }
  cache::KeyPrior prior;
  std::vector<cache::ExpertKey> prewarm;
  if (have_usage) {
    prior = usage.prior(g);
    prewarm = usage.hottest(g.key_count());
  }
  if (o.policy == "all") {
    // forecast and every classic baseline side by side (docs/MEASUREMENTS.md has the table).
    const std::vector<std::string> specs = cache::comparison_policies();
    auto rows = cache::compare_policies(trace, specs, o.working_sets, prior, prewarm, g.experts_per_layer());
    if (o.json) {
      nlohmann::json j;
      j["trace"] = o.trace;
      j["policies"] = specs;
      j["tokens"] = trace.tokens();
      j["working_set_slots"] = g.working_set_slots();
      j["prewarmed"] = have_usage;
      j["rows"] = rows_json(rows);
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("trace %s: %zu tokens, %u MoE layers x top-%u (working set %u slots)%s\n\n%s", trace.source.c_str(),
                trace.tokens(), trace.moe_layers, trace.top_k, g.working_set_slots(),
                have_usage ? ", pre-warmed from usage counts" : "", cache::comparison_table(specs, rows).c_str());
    return;
  }
  auto rows = cache::sweep(trace, o.policy, o.working_sets, prior, prewarm, g.experts_per_layer());

  if (o.json) {
    nlohmann::json j;
    j["trace"] = o.trace;
    j["policy"] = o.policy;
    j["tokens"] = trace.tokens();
    j["moe_layers"] = trace.moe_layers;
    j["top_k"] = trace.top_k;
    j["working_set_slots"] = g.working_set_slots();
    j["prewarmed"] = have_usage;
    j["rows"] = rows_json(rows);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("trace %s: %zu tokens, %u MoE layers x top-%u (working set %u slots), policy %s%s\n",
              trace.source.c_str(), trace.tokens(), trace.moe_layers, trace.top_k, g.working_set_slots(),
              o.policy.c_str(), have_usage ? ", pre-warmed from usage counts" : "");
  // "optimal": Belady, free to not cache a missed record; "no bypass": Belady when every missed
  // record takes a slot while its layer runs, as in iod.
  std::printf("%12s %7s %9s %9s %10s %13s\n", "working sets", "slots", "hit rate", "optimal", "no bypass",
              "% of optimal");
  for (const auto& r : rows)
    std::printf("%12g %7u %8.1f%% %8.1f%% %9.1f%% %12.1f%%\n", r.working_sets, r.slots, 100 * r.hit_rate,
                100 * r.optimal_hit_rate, 100 * r.optimal_no_bypass_hit_rate,
                r.optimal_hit_rate > 0 ? 100 * r.hit_rate / r.optimal_hit_rate : 0.0);
}

}  // namespace

void register_iobench_command(CLI::App& app) {
  auto o = std::make_shared<IobenchOptions>();
  CLI::App* cmd = app.add_subcommand("iobench", "Replay a routing trace through the expert cache");
  cmd->add_option("--trace", o->trace, "routing trace (.jsonl, one {\"tok\", \"layers\"} object per token)");
  cmd->add_flag("--simulate", o->simulate, "simulate the cache only (no I/O); compare with Belady's optimum");
  cmd->add_option("--policy", o->policy,
                  cache::policy_help() + "; with --simulate also 'all': forecast and every classic baseline side by side");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->add_option("--working-sets", o->working_sets, "cache sizes in token working sets (default 0.5 1 2 4 8)")
      ->delimiter(',');
  cmd->add_option("--experts", o->experts, "experts per layer (default: largest id in the trace + 1)");
  cmd->add_option("--usage", o->usage, "usage file: pre-warm the cache and seed the policy with its counts");
  cmd->add_option("--learn-tokens", o->learn_tokens,
                  "learn usage counts from the first N tokens, replay the rest pre-warmed with them");
  cmd->add_option("--write-usage", o->write_usage, "write the usage counts (learned or of the whole trace) here");
  CLI::Option* read_records =
      cmd->add_option("--read-records", o->read_records,
                      "read the records listed in FILE ('layer expert' a line) with direct I/O in that order at --qd "
                      "through --io, and print the rate (the e2e harness's replay of a run's own reads)");
  cmd->add_option("--timed-last", o->timed_last,
                     "with --read-records: time only the last N records (the rest are read first, untimed)")
      ->needs(read_records);
  iobench::add_replay_options(cmd, o->replay);
  // --read-records uses the model, --qd, --io, --json and --no-drop-caches; every other option
  // (the trace replay's and the simulation's) is refused by name with it, not ignored.
  for (CLI::Option* opt : cmd->get_options()) {
    const std::string name = opt->get_name();
    if (opt == read_records || name == "--timed-last" || name == "model" || name == "--qd" || name == "--io" ||
        name == "--json" || name == "--no-drop-caches" || name == "--help")
      continue;
    read_records->excludes(opt);
  }
  cmd->callback([o] { run_iobench(*o); });
}

}  // namespace waste::cli
