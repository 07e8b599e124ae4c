// `waste bench MODEL [--resident] [-n N] [--json]`: decode tok/s and time per phase (attention,
// router, fetch wait, expert kernels, other MLP work, head). It feeds a fixed pseudo-random
// sequence of ids instead of sampling (random weights collapse into one repeated token, which
// would make every token hit the same experts). --resident reads every expert into RAM first,
// so the figure is compute alone.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "shared/util/error.h"
#include "tools/waste/commands.h"
#include "tools/waste/engine_cli.h"

namespace waste::cli {

namespace {

struct BenchOptions {
  EngineCliOptions engine;
  int tokens = 32, warmup = 2;
  uint64_t seed = 1;
  bool json = false;
};

void run_bench(const BenchOptions& o) {
  require(o.tokens >= 1 && o.warmup >= 0, "bench: -n must be >= 1 and --warmup >= 0");
  EngineHandle h(o.engine);
  Engine& e = h.engine();
  const ModelConfig& c = e.config();
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> ids(size_t(o.tokens + o.warmup));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(c.vocab));
  Session s = e.new_session(std::max<int64_t>(o.engine.context, int64_t(ids.size()) + 1));
  std::vector<float> logits(size_t(c.vocab));
  for (int i = 0; i < o.warmup; ++i) e.model().forward(s, std::span<const int32_t>(&ids[size_t(i)], 1), logits.data());

  PhaseTimes phases;
  e.model().set_profile(&phases);
  const ExpertSourceStats before = e.experts().stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = o.warmup; i < o.warmup + o.tokens; ++i)
    e.model().forward(s, std::span<const int32_t>(&ids[size_t(i)], 1), logits.data());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  e.model().set_profile(nullptr);
  const ExpertSourceStats after = e.experts().stats();
  const uint64_t hits = after.hits - before.hits, misses = after.misses - before.misses,
                 bytes = after.bytes_read - before.bytes_read;
  const double per = 1000.0 / o.tokens;  // ms per token
  const std::pair<const char*, double> rows[] = {
      {"attention", phases.attention}, {"router", phases.router},     {"fetch_wait", phases.fetch_wait},
      {"experts", phases.experts},     {"mlp_other", phases.mlp},     {"head", phases.head},
      {"embed", phases.embed},         {"other", secs - phases.total() + phases.other}};
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.engine.model;
    j["experts"] = h.expert_path();
    j["tokens"] = o.tokens;
    j["seconds"] = secs;
    j["tok_per_s"] = o.tokens / secs;
    j["expert_hits"] = hits;
    j["expert_misses"] = misses;
    j["bytes_read"] = bytes;
    for (const auto& [name, t] : rows) j["ms_per_token"][name] = t * per;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: %d decode tokens in %.3f s: %.2f tok/s  [experts: %s]\n", o.engine.model.c_str(), o.tokens, secs,
              o.tokens / secs, h.expert_path().c_str());
  std::printf("  expert hits %llu, misses %llu, %.3f GB read\n", (unsigned long long)hits, (unsigned long long)misses,
              double(bytes) / 1e9);
  std::printf("  per token:");
  for (const auto& [name, t] : rows) std::printf(" %s %.2f ms", name, t * per);
  std::printf("\n");
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Decode speed and time per phase on a fixed pseudo-random token sequence");
  add_engine_options(cmd, o->engine);
  cmd->add_option("-n,--tokens", o->tokens, "Decode tokens to time (32)");
  cmd->add_option("--warmup", o->warmup, "Untimed decode tokens first (2)");
  cmd->add_option("--seed", o->seed, "Seed of the token sequence");
  cmd->add_flag("--resident", o->engine.resident, "Read every expert into RAM first: compute only, no I/O");
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace waste::cli
