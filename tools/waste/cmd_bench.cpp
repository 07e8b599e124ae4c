// `waste bench MODEL [--resident] [--prefill P] [-n N] [--json]`: decode tok/s and time per phase
// (attention, router, fetch wait, expert kernels, other MLP work, head). It feeds a fixed
// pseudo-random sequence of ids instead of sampling (random weights collapse into one repeated
// token, which would make every token hit the same experts). --prefill first runs a P-token
// prompt through chunked prefill (--chunk) and times it on its own; decode then continues from
// that context. --resident reads every expert into RAM first, so the figure is compute alone.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "shared/stats/arithmetic.h"
#include "shared/stats/json.h"
#include "shared/util/error.h"
#include "shared/util/option_limits.h"
#include "tools/waste/commands.h"
#include "tools/waste/option_checks.h"
#include "tools/waste/engine_cli.h"
#include "tools/waste/quit_signals.h"

namespace waste::cli {

namespace {

struct BenchOptions {
  EngineCliOptions engine;
  int tokens = 32, warmup = 2, prefill = 0;
  uint64_t seed = 1;
  bool json = false;
  bool context_given = false;  // --ctx on the command line: the tokens must fit it
};

// iod's process CPU seconds so far (its stats RPC), or a negative value when not through iod.
double iod_cpu_seconds(Engine& e) {
  auto* iod = dynamic_cast<IodExperts*>(&e.experts());
  return iod ? iod->client().stats().value("cpu_seconds", 0.0) : -1.0;
}

// Through iod, so far (docs/PROTOCOL.md, "Unpinned reads" and CHECKING): MoE layers served
// unpinned, experts fetched again after a torn read, uses never reported to iod (it did not
// answer), experts handed out while iod still checked their record and those whose check then
// failed; zeros otherwise.
struct IodCounts {
  uint64_t layers = 0, refetched = 0, unreported = 0, unchecked = 0, failed_after = 0;
  IodCounts since(const IodCounts& a) const {
    return {layers - a.layers, refetched - a.refetched, unreported - a.unreported, unchecked - a.unchecked,
            failed_after - a.failed_after};
  }
};
IodCounts iod_counts(Engine& e) {
  auto* iod = dynamic_cast<IodExperts*>(&e.experts());
  return iod ? IodCounts{iod->unpinned_layers(), iod->unpinned_refetched(), iod->uses_dropped(),
                              iod->handed_unchecked(), iod->failed_after_handout()}
             : IodCounts{};
}

// The model adds its phase times to *p while this lives, and never after: an early return (a
// quit signal) must not leave it pointing at a destroyed local.
class ProfileScope {
 public:
  ProfileScope(Model& m, PhaseTimes* p) : m_(m) { m_.set_profile(p); }
  ~ProfileScope() { end(); }
  void end() { m_.set_profile(nullptr); }

 private:
  Model& m_;
};

void run_bench(const BenchOptions& given) {
  BenchOptions o = given;
  // Each count is bounded by its option (CLI::Range), so the sum cannot overflow in int64.
  const int64_t total = int64_t(o.prefill) + o.warmup + o.tokens;
  const std::string sum = "--prefill " + std::to_string(o.prefill) + " + --warmup " + std::to_string(o.warmup) +
                             " + -n " + std::to_string(o.tokens) + " = " + std::to_string(total) + " tokens";
  if (o.context_given) {
    require(total <= o.engine.context, "bench: " + sum + " do not fit --ctx " + std::to_string(o.engine.context));
  } else {
    // Without --ctx the session (and a private iod's plan) grows to hold the benchmark's tokens.
    require(total <= limits::kMaxContextTokens,
            "bench: " + sum + " exceed the largest --ctx, " + std::to_string(limits::kMaxContextTokens));
    o.engine.context = std::max<int64_t>(o.engine.context, total);
  }
  EngineHandle h(o.engine);
  Engine& e = h.engine();
  const ModelConfig& c = e.config();
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> ids(size_t(o.prefill + o.tokens + o.warmup));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(c.vocab));
  Session s = e.new_session(o.engine.context);
  std::vector<float> logits(size_t(c.vocab));

  // The prompt: chunks of --chunk through Engine::prefill, each chunk fetching the union of its
  // tokens' experts once per layer.
  PhaseTimes prefill_phases;
  ExpertSourceStats pre_before = e.experts().stats(), pre_after = pre_before;
  double prefill_secs = 0;
  if (o.prefill > 0) {
    ProfileScope profile(e.model(), &prefill_phases);
    const auto p0 = std::chrono::steady_clock::now();
    // One call, as a prompt's prefill runs (inner chunks skip the head: calling it per chunk
    // would time a head per chunk); a quit signal is noticed when it returns.
    e.prefill(s, std::span<const int32_t>(ids.data(), size_t(o.prefill)), logits.data());
    if (quit::requested.load()) return;
    prefill_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    profile.end();
    pre_after = e.experts().stats();
  }
  // A quit signal ends the benchmark between tokens, unreported (run_until_signal).
  for (int i = o.prefill; i < o.prefill + o.warmup; ++i) {
    if (quit::requested.load()) return;
    e.model().forward(s, std::span<const int32_t>(&ids[size_t(i)], 1), logits.data());
  }

  PhaseTimes phases;
  const Model::LookaheadStats la_before = e.model().lookahead_stats();
  ProfileScope profile(e.model(), &phases);
  const ExpertSourceStats before = e.experts().stats();
  const double iod_cpu0 = iod_cpu_seconds(e);
  const IodCounts counts0 = iod_counts(e);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = o.prefill + o.warmup; i < o.prefill + o.warmup + o.tokens; ++i) {
    if (quit::requested.load()) return;
    e.model().forward(s, std::span<const int32_t>(&ids[size_t(i)], 1), logits.data());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  profile.end();
  const ExpertSourceStats after = e.experts().stats();
  const double iod_cpu = iod_cpu0 < 0 ? -1.0 : iod_cpu_seconds(e) - iod_cpu0;  // over the timed decode
  const ExpertSourceStats decode = stats::minus(after, before);
  const uint64_t moe_layer_steps = uint64_t(e.container().expert_layers().size()) * uint64_t(o.tokens);
  const IodCounts counts = iod_counts(e).since(counts0);
  const uint64_t hits = decode.hits, misses = decode.misses, bytes = decode.bytes_read;
  const uint64_t pf_issued = decode.prefetch_issued, pf_used = decode.prefetch_used, pf_wasted = decode.prefetch_wasted;
  // A wasted prefetch read one whole record; the bytes are at most the largest record's stride
  // each (exact when, as in every model here, all MoE layers share one record shape).
  uint64_t record_stride = 0;
  for (const auto& l : e.container().expert_layers()) record_stride = std::max(record_stride, l.layout.stride);
  const double wasted_mb_per_token = double(pf_wasted) * double(record_stride) / 1e6 / std::max(1, o.tokens);
  const Model::LookaheadStats la = e.model().lookahead_stats().since(la_before);
  const ExpertSourceStats prefill = stats::minus(pre_after, pre_before);
  const double per = 1000.0 / o.tokens;  // ms per token
  const std::pair<const char*, double> rows[] = {
      {"attention", phases.attention}, {"router", phases.router},     {"fetch_wait", phases.fetch_wait},
      {"experts", phases.experts},     {"mlp_other", phases.mlp},     {"head", phases.head},
      {"embed", phases.embed},         {"other", secs - phases.total() + phases.other}};
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.engine.model;
    j["experts"] = h.expert_path();
    j["usage_file"] = h.usage_note();
    j["tokens"] = o.tokens;
    j["seconds"] = secs;
    j["tok_per_s"] = o.tokens / secs;
    // The expert counters of the timed decode under their names in the list
    // (shared/stats/expert_stats.h: hits, misses, bytes_read, prefetch/issued|used|wasted), as
    // iod's stats and `waste status --json` name them.
    stats::to_json(j, decode);
    if (iod_cpu >= 0) {
      j["iod_cpu_seconds"] = iod_cpu;
      j["unpinned"] = {{"layers", counts.layers},
                       {"of_layers", moe_layer_steps},
                       {"refetched", counts.refetched},
                       {"unreported_uses", counts.unreported}};
      j["checking"] = {{"handed_out", counts.unchecked}, {"failed", counts.failed_after}};
    }
    for (const auto& [name, t] : rows) j["ms_per_token"][name] = t * per;
    j["prefetch"]["wasted_mb_per_token_at_most"] = wasted_mb_per_token;
    j["lookahead"] = {{"per_token", e.model().lookahead()}, {"recall", la.recall()}, {"precision", la.precision()},
                      {"guessed", la.predicted}, {"needed", la.needed}, {"hit", la.hit}};
    if (o.prefill > 0) {
      j["prefill"] = {{"tokens", o.prefill},
                      {"chunk", o.engine.chunk},
                      {"seconds", prefill_secs},
                      {"tok_per_s", o.prefill / prefill_secs},
                      {"ms", {{"attention", prefill_phases.attention * 1e3},
                              {"router", prefill_phases.router * 1e3},
                              {"fetch_wait", prefill_phases.fetch_wait * 1e3},
                              {"experts", prefill_phases.experts * 1e3},
                              {"mlp_other", prefill_phases.mlp * 1e3},
                              {"head", prefill_phases.head * 1e3}}}};
      stats::to_json(j["prefill"], prefill);  // the prompt's expert counters, named as above
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (o.prefill > 0)
    std::printf("%s: prefill of %d tokens (chunks of %d) in %.3f s: %.2f tok/s, expert hits %llu, misses %llu, "
                "%.3f GB read\n",
                o.engine.model.c_str(), o.prefill, o.engine.chunk, prefill_secs, o.prefill / prefill_secs,
                (unsigned long long)prefill.hits, (unsigned long long)prefill.misses, double(prefill.bytes_read) / 1e9);
  std::printf("%s: %d decode tokens in %.3f s: %.2f tok/s  [experts: %s; usage file: %s]\n", o.engine.model.c_str(),
              o.tokens, secs, o.tokens / secs, h.expert_path().c_str(), h.usage_note().c_str());
  std::printf("  expert hits %llu, misses %llu, %.3f GB read; prefetch issued %llu, used %llu, wasted %llu\n",
              (unsigned long long)hits, (unsigned long long)misses, double(bytes) / 1e9, (unsigned long long)pf_issued,
              (unsigned long long)pf_used, (unsigned long long)pf_wasted);
  if (pf_wasted > 0) std::printf("  wasted prefetch: at most %.2f MB per decode token\n", wasted_mb_per_token);
  if (iod_cpu >= 0 && bytes > 0)
    std::printf("  iod CPU %.3f s/GB (%.3f s over %.3f GB read)\n", iod_cpu / (double(bytes) / 1e9), iod_cpu,
                double(bytes) / 1e9);
  if (iod_cpu >= 0) {
    std::printf("  unpinned reads: %llu of %llu MoE layers, %llu experts fetched again after a torn read, %llu uses "
                "never reported to iod\n",
                (unsigned long long)counts.layers, (unsigned long long)moe_layer_steps,
                (unsigned long long)counts.refetched, (unsigned long long)counts.unreported);
    std::printf("  experts handed out while iod checked their record: %llu (checks that then failed: %llu)\n",
                (unsigned long long)counts.unchecked, (unsigned long long)counts.failed_after);
  }
  if (e.model().lookahead() > 0)
    std::printf("  lookahead %d per token: recall %.1f%% of the routed experts, precision %.1f%% of the guesses\n",
                e.model().lookahead(), 100 * la.recall(), 100 * la.precision());
  std::printf("  per token:");
  for (const auto& [name, t] : rows) std::printf(" %s %.2f ms", name, t * per);
  std::printf("\n");
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Decode speed and time per phase on a fixed pseudo-random token sequence");
  add_engine_options(cmd, o->engine);
  const int max_tokens = int(limits::kMaxContextTokens);  // a count past the largest context cannot run
  cmd->add_option("-n,--tokens", o->tokens, "Decode tokens to time (32)")->check(CLI::Range(1, max_tokens));
  cmd->add_option("--warmup", o->warmup, "Untimed decode tokens first (2)")->check(CLI::Range(0, max_tokens));
  cmd->add_option("--prefill", o->prefill, "Time a prompt of this many ids through chunked prefill first (0: none)")
      ->check(CLI::Range(0, max_tokens));
  cmd->footer(
      "--prefill + --warmup + -n tokens go through one session: they must fit --ctx when it is given; without\n"
      "--ctx the context is 4096 or their sum, whichever is larger.");
  cmd->add_option("--seed", o->seed, "Seed of the token sequence (0 to 2^64-1)")->check(uint64_value());
  CLI::Option* resident =
      cmd->add_flag("--resident", o->engine.resident, "Read every expert into RAM first: compute only, no I/O");
  // Options of the expert path through iod (or of --no-iod's reads): --resident reads none that
  // way, so each is refused by name beside it rather than ignored.
  for (const char* name : {"--no-iod", "--pinned-reads", "--run-dir", "--budget", "--slots", "--working-sets"})
    resident->excludes(cmd->get_option(name));
  cmd->add_flag("--json", o->json, "JSON output");
  // Benchmarks start cold: a usage file left by an earlier run pre-warms the cache and flatters
  // the figures (18% on repeated runs, docs/MEASUREMENTS.md).
  o->engine.usage = false;
  cmd->add_flag("--usage", o->engine.usage,
                "A private iod pre-warms from the container's usage file and updates it (default: cold start)")
      ->excludes(resident);
  // SIGINT/SIGTERM/SIGHUP: the private iod, run directory and timeline parts go, then this process.
  cmd->callback([o, cmd] {
    o->context_given = cmd->count("--ctx") > 0;
    quit::run_until_signal([&] { run_bench(*o); });
  });
}

}  // namespace waste::cli
