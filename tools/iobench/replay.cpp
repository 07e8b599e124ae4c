#include "tools/iobench/replay.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <vector>

#include "iod/cache/routing_trace.h"
#include "tools/iobench/percentile.h"
#include "shared/container/reader.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/ipc/segment_layout.h"
#include "shared/ipc/shm_segment.h"
#include "shared/platform/direct_io.h"
#include "shared/util/error.h"
#include "tools/iobench/private_iod.h"
#include "tools/iobench/request_trace.h"

namespace waste::iobench {

namespace {

using Clock = std::chrono::steady_clock;

// The iod socket of a run directory: iod.sock, else the only *.sock there.
std::string find_socket(const std::string& run_dir) {
  std::string main = run_dir + "/iod.sock";
  std::error_code ec;
  if (std::filesystem::exists(main, ec)) return main;
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(run_dir, ec))
    if (e.path().extension() == ".sock") found.push_back(e.path().string());
  require(found.size() == 1, "iobench: " + run_dir + " holds " + std::to_string(found.size()) +
                                 " *.sock files; expected one iod socket");
  return found[0];
}

// A private iod and its run directory, stopped and removed on every way out (the daemon
// removes its segment on SIGTERM; a segment it could not remove, e.g. after a crash, is
// removed here by its instance prefix).
struct PrivateRun {
  std::optional<PrivateIod> iod;
  std::string dir;
  PrivateRun() = default;
  PrivateRun(const PrivateRun&) = delete;
  PrivateRun& operator=(const PrivateRun&) = delete;
  ~PrivateRun() { stop(); }
  void stop() {
    if (iod) iod->stop();
    iod.reset();
    if (dir.empty()) return;
    ipc::remove_instance_segments(ipc::instance_id_for(dir));
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    dir.clear();
  }
};

}  // namespace

void add_replay_options(CLI::App* cmd, ReplayOptions& o) {
  cmd->add_option("model", o.model, "container (.waste) to replay against (not needed with --simulate)");
  cmd->add_option("--run-dir", o.run_dir, "attach to the iod running there (else start a private one)");
  cmd->add_option("--budget", o.budget, "private iod: cache bytes or auto (default: --cache-ws working sets)");
  cmd->add_option("--cache-ws", o.cache_ws, "private iod: cache size in token working sets (default 1)");
  cmd->add_option("--qd", o.qd, "reads in flight, for iod and the raw measurement, 1-256 (default 32)")
      ->check(CLI::Range(1u, 256u));
  cmd->add_option("--io", o.io,
                  std::string("uring or pread, for a private iod and the raw measurement (default ") +
                      iod::kDefaultIo + (iod::kHaveUring ? ")" : "; built without io_uring)"))
      ->check(iod::io_choice_problem);
  cmd->add_option("--lookahead", o.lookahead, "prefetch the next N layers' experts from the trace (default 0)");
  cmd->add_option("--tokens", o.tokens, "replay only the first N tokens");
  cmd->add_flag("!--no-raw", o.raw, "skip the raw device measurement");
  cmd->add_option("--rounds", o.rounds, "replay the trace in N consecutive slices with a raw pass around each (5)")
      ->check(CLI::Range(1u, 1000u));
  cmd->add_option("--raw-gb", o.raw_gb, "GB per raw read pass (2)")->check(CLI::Range(0.000001, 1000.0));
  cmd->add_option("--raw-seconds", o.raw_seconds, "at most this long per raw read pass (5)")
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_option("--raw-depth", o.raw_depth, "reads in flight of the second raw read (default: the replay's mean)");
  cmd->add_flag("!--no-drop-caches", o.drop_caches, "do not drop the page cache before each pass");
}

namespace {

// One replay round (a slice of the trace) as the client saw it.
struct ReplayRound {
  size_t first_token = 0, tokens = 0;
  double seconds = 0;
  uint64_t bytes = 0, hits = 0, misses = 0;  // iod's counters over the round
  // Reads, client view: a fetch that hands out a record in another slot or generation than the
  // last fetch of that record saw is a new read. Depth: the step's records still Loading when
  // the fetch returned, sampled each time a wait returns (a step function from above: a read
  // that ended unobserved counts until the next sample).
  uint64_t reads = 0, steps_with_reads = 0;
  double depth_area = 0, busy_seconds = 0;  // sum of depth x time; time with reads in flight
  std::vector<double> fetch_us;
  std::vector<double> reuse_gb;  // per read of a record read before in the run: GB read since
  uint64_t first_reads = 0;      // reads of records the run had not read before
  double load1 = 0;
  double gb_per_s() const { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0; }
  double mean_depth() const { return busy_seconds > 0 ? depth_area / busy_seconds : 0; }
  double mean_burst() const { return steps_with_reads ? double(reads) / double(steps_with_reads) : 0; }
};

// One raw pass between rounds: the coldest records at qd, then at the replay's depth, then
// (after a round) records drawn with the round's reuse distances (record_ages.h), at qd.
struct RawPass {
  bool dropped = false;
  std::string why_not_dropped;
  RawResult at_qd, at_depth, at_matched;
  bool has_depth = false, has_matched = false;
  double matched_reuse_gb = 0;  // the median reuse distance of the round it copies
  std::vector<double> reuse_gb;
  uint64_t first_reads = 0;
  double load1 = 0;
};

double load_average_1min() {
  double l = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = 0;
    std::fclose(f);
  }
  return l;
}

void note_reuse(int64_t reuse, std::vector<double>& reuse_gb, uint64_t& first_reads) {
  if (reuse < 0)
    ++first_reads;
  else
    reuse_gb.push_back(double(reuse) / 1e9);
}

// The handle each record was last handed out in (flat index: bank-major), to tell new reads.
struct LastHandles {
  std::vector<size_t> first;  // flat index of each bank's expert 0
  std::vector<std::optional<ipc::SlotHandle>> last;
  explicit LastHandles(const Container& c) {
    size_t n = 0;
    for (const auto& l : c.expert_layers()) first.push_back(n), n += l.expert_count;
    last.resize(n);
  }
  // True when h differs from the handle of the record's previous fetch (or it had none).
  bool changed(uint32_t bank, uint32_t expert, ipc::SlotHandle h) {
    auto& slot = last[first[bank] + expert];
    bool changed = !slot || !(*slot == h);
    slot = h;
    return changed;
  }
};

ReplayRound replay_round(ipc::ExpertStoreClient& client, const Container& c, const cache::RoutingTrace& trace,
                         size_t t_begin, size_t t_end, uint32_t lookahead, std::vector<ipc::SlotHandle>& held,
                         RecordAges& ages, LastHandles& seen) {
  const auto& layers = c.expert_layers();
  const uint32_t L = trace.moe_layers, K = trace.top_k;
  ReplayRound r;
  r.first_token = t_begin;
  r.tokens = t_end - t_begin;
  r.fetch_us.reserve(r.tokens * L);
  nlohmann::json before = client.stats();
  std::vector<uint32_t> loading;
  loading.reserve(K);
  auto t0 = Clock::now();
  for (size_t t = t_begin; t < t_end; ++t) {
    for (uint32_t i = 0; i < L; ++i) {
      const uint32_t* ex = trace.layer_experts(t, i);
      auto f0 = Clock::now();
      auto handles = client.fetch(uint32_t(layers[i].layer), {ex, K}, held);
      auto issued = Clock::now();
      // The oracle prefetch of the coming layers (what a perfect router predictor would send),
      // kept inside the round so no read of the next round runs during a raw pass.
      for (uint32_t a = 1; a <= lookahead; ++a) {
        size_t flat = t * L + i + a;
        if (flat >= t_end * L) break;
        client.prefetch(uint32_t(layers[flat % L].layer), {trace.layer_experts(flat / L, uint32_t(flat % L)), K});
      }
      loading.clear();
      uint32_t step_reads = 0;
      for (uint32_t j = 0; j < handles.size(); ++j) {
        // In progress until verified: wait() below returns at READY, through the check.
        if (ipc::in_progress(client.state(handles[j]))) loading.push_back(j);
        if (seen.changed(i, ex[j], handles[j])) {
          ++step_reads;
          note_reuse(ages.note_read({i, ex[j]}), r.reuse_gb, r.first_reads);
        }
      }
      r.reads += step_reads;
      r.steps_with_reads += step_reads > 0;
      if (!loading.empty()) {
        size_t depth = loading.size();
        auto prev = issued;
        for (uint32_t j : loading) {
          client.wait(handles[j]);
          auto now = Clock::now();
          r.depth_area += double(depth) * std::chrono::duration<double>(now - prev).count();
          prev = now;
          depth = 0;
          for (uint32_t k : loading) depth += ipc::in_progress(client.state(handles[k]));
        }
        r.busy_seconds += std::chrono::duration<double>(prev - issued).count();
      }
      for (const auto& h : handles) client.wait(h);
      r.fetch_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - f0).count());
      held = std::move(handles);
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  nlohmann::json after = client.stats();
  auto delta = [&](const char* k) { return after[k].get<uint64_t>() - before[k].get<uint64_t>(); };
  r.bytes = delta("bytes_read");
  r.hits = delta("hits");
  r.misses = delta("misses");
  r.load1 = load_average_1min();
  return r;
}

// match: the previous round's reads as reuse distances in bytes (-1: first read); none: no
// matched read.
RawPass raw_pass(const ReplayOptions& o, RecordAges& ages, std::mt19937_64& rng, uint32_t depth,
                 const std::vector<int64_t>* match) {
  RawPass p;
  if (o.drop_caches) {
    p.why_not_dropped = platform::drop_page_cache();
    p.dropped = p.why_not_dropped.empty();
  } else {
    p.why_not_dropped = "--no-drop-caches";
  }
  const uint64_t bytes = uint64_t(o.raw_gb * 1e9);
  auto read = [&](uint32_t qd, const std::vector<int64_t>* reuses = nullptr) {
    std::vector<RecordRef> recs = reuses ? ages.like_reuse(*reuses, bytes, rng) : ages.coldest(bytes, rng);
    RawResult res = measure_raw_records(o.model, recs, qd, o.io, o.raw_seconds);
    for (size_t k = 0; k < res.reads; ++k) note_reuse(ages.note_read(recs[k]), p.reuse_gb, p.first_reads);
    return res;
  };
  p.at_qd = read(o.qd);
  if (depth > 0 && depth != o.qd) {
    p.at_depth = read(depth);
    p.has_depth = true;
  }
  if (match && !match->empty()) {
    // The round's distances, moved on by this pass's own reads since (they advanced the clock).
    const int64_t moved = int64_t(p.at_qd.bytes + p.at_depth.bytes);
    std::vector<int64_t> shifted = *match;
    std::vector<double> gb;
    for (int64_t& d : shifted)
      if (d >= 0) gb.push_back(double(d) / 1e9), d += moved;
    p.matched_reuse_gb = median(gb);
    p.at_matched = read(o.qd, &shifted);
    p.has_matched = true;
  }
  p.load1 = load_average_1min();
  return p;
}

nlohmann::json raw_json(const RawResult& r) {
  return nlohmann::json{{"gb_per_s", r.gb_per_s}, {"p50_us", r.p50_us}, {"p99_us", r.p99_us}, {"reads", r.reads},
                        {"bytes", r.bytes},       {"seconds", r.seconds}, {"depth", r.depth},
                        {"read_fixed", r.fixed_buffers}};
}

// The mean of the present values (none: 0).
double mean_of(std::initializer_list<std::optional<double>> xs) {
  double s = 0;
  int n = 0;
  for (const auto& x : xs)
    if (x) s += *x, ++n;
  return n ? s / n : 0;
}

}  // namespace

void run_replay(const ReplayOptions& o, const std::string& trace_path, const std::string& policy, bool json) {
  require(!o.model.empty(), "iobench: MODEL is required (or use --simulate)");
  require(!trace_path.empty(), "iobench: --trace FILE is required");
  Container c = Container::open(o.model);
  const auto& layers = c.expert_layers();
  cache::RoutingTrace trace;
  if (is_request_trace(trace_path)) {  // iod's own --trace output
    std::vector<uint32_t> moe;
    for (const auto& l : layers) moe.push_back(uint32_t(l.layer));
    trace = routing_from_request_trace(trace_path, moe);
  } else {
    trace = cache::read_routing_trace(trace_path);
  }
  if (o.tokens > 0 && o.tokens < trace.tokens()) trace = trace.slice(0, o.tokens);
  require(trace.moe_layers <= layers.size(),
          "iobench: trace " + trace_path + " has " + std::to_string(trace.moe_layers) + " MoE layers, container " +
              o.model + " has " + std::to_string(layers.size()));
  uint32_t min_experts = UINT32_MAX;
  for (const auto& l : layers) min_experts = std::min(min_experts, l.expert_count);
  require(trace.max_expert < min_experts,
          "iobench: trace " + trace_path + " routes to expert " + std::to_string(trace.max_expert) + ", container " +
              o.model + " has " + std::to_string(min_experts) + " experts per layer");
  const uint32_t rounds = uint32_t(std::max<size_t>(1, std::min<size_t>(o.rounds, trace.tokens())));

  // Attach, or start a private iod sized in working sets of the trace's shape. `priv` stops it
  // and removes its run directory and segment on every way out of this function.
  PrivateRun priv;
  std::string socket;
  if (!o.run_dir.empty()) {
    socket = find_socket(o.run_dir);
  } else {
    char tmpl[] = "/tmp/waste-iobench-XXXXXX";
    require(::mkdtemp(tmpl) != nullptr, "iobench: cannot create a run directory in /tmp");
    priv.dir = tmpl;
    // A benchmark ignores the container's usage file (no prior, no pre-warm, nothing saved):
    // every run starts from the same cold cache and leaves the container as it was.
    std::vector<std::string> args = {"--model", o.model, "--qd", std::to_string(o.qd), "--io", o.io, "--policy", policy,
                                     "--no-usage"};
    if (!o.budget.empty()) {
      args.insert(args.end(), {"--budget", o.budget});
    } else {
      uint32_t slots = std::max<uint32_t>(trace.top_k, uint32_t(o.cache_ws * trace.working_set_slots() + 0.5));
      args.insert(args.end(), {"--slots", std::to_string(slots)});
    }
    priv.iod.emplace(args, priv.dir);
    socket = priv.iod->socket_path();
  }

  // Interleaved: raw pass 0, round 1, raw pass 1, ..., round N, raw pass N. Round i's
  // reference is the mean of passes i-1 and i (a virtual disk's rate drifts between passes).
  // The depth read needs the replay's depth: from --raw-depth, else measured in round 1 (then
  // pass 0 has no depth read and round 1's depth reference is pass 1 alone).
  std::vector<uint32_t> experts_per_bank;
  std::vector<uint64_t> strides;
  for (const auto& l : layers) experts_per_bank.push_back(l.expert_count), strides.push_back(l.layout.stride);
  RecordAges ages(experts_per_bank, strides);
  std::mt19937_64 rng(12345);  // the same cold picks for the same reads every run
  uint32_t depth = o.raw_depth;
  LastHandles seen(c);
  std::vector<RawPass> passes;
  std::vector<ReplayRound> rounds_done;
  std::vector<std::string> replay_drop_why;
  const double load_before = load_average_1min();
  if (o.raw) passes.push_back(raw_pass(o, ages, rng, depth, nullptr));

  nlohmann::json report;
  {
    ipc::ExpertStoreClient client(socket, c.container_id());
    std::vector<ipc::SlotHandle> held;
    for (uint32_t k = 0; k < rounds; ++k) {
      size_t b = trace.tokens() * k / rounds, e = trace.tokens() * (k + 1) / rounds;
      if (o.drop_caches) {
        std::string why = platform::drop_page_cache();
        if (!why.empty()) replay_drop_why.push_back(why);
      }
      rounds_done.push_back(replay_round(client, c, trace, b, e, o.lookahead, held, ages, seen));
      if (depth == 0)
        depth = std::clamp<uint32_t>(uint32_t(std::lround(rounds_done[0].mean_depth())), 1u, std::max(1u, o.qd));
      std::vector<int64_t> reuses(rounds_done.back().first_reads, -1);
      for (double g : rounds_done.back().reuse_gb) reuses.push_back(int64_t(g * 1e9));
      if (o.raw) passes.push_back(raw_pass(o, ages, rng, depth, &reuses));
    }
    client.release(held);
    nlohmann::json after = client.stats();

    uint64_t bytes = 0, hits = 0, misses = 0, reads = 0, steps = 0, first_reads = 0;
    double seconds = 0, area = 0, busy = 0;
    std::vector<double> fetch_us, reuse_gb;
    for (const auto& r : rounds_done) {
      bytes += r.bytes, hits += r.hits, misses += r.misses, seconds += r.seconds;
      reads += r.reads, steps += r.steps_with_reads, area += r.depth_area, busy += r.busy_seconds;
      first_reads += r.first_reads;
      fetch_us.insert(fetch_us.end(), r.fetch_us.begin(), r.fetch_us.end());
      reuse_gb.insert(reuse_gb.end(), r.reuse_gb.begin(), r.reuse_gb.end());
    }
    report["model"] = o.model;
    report["trace"] = trace_path;
    report["tokens"] = trace.tokens();
    report["moe_layers"] = trace.moe_layers;
    report["top_k"] = trace.top_k;
    report["io_path"] = after["io_path"];
    report["policy"] = after["policy"];
    report["slots"] = after["slot_count"];
    report["cache_working_sets"] = double(after["slot_count"].get<uint32_t>()) / trace.working_set_slots();
    report["qd"] = o.qd;
    report["lookahead"] = o.lookahead;
    report["hit_rate"] = hits + misses ? double(hits) / double(hits + misses) : 0.0;
    report["hits"] = hits;
    report["misses"] = misses;
    report["bytes_read"] = bytes;
    report["seconds"] = seconds;  // replay time only (the raw passes between rounds excluded)
    report["gb_per_s"] = seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0;
    report["fetch_latency_us"] = {{"p50", percentile(fetch_us, 0.5)}, {"p99", percentile(fetch_us, 0.99)}};
    report["record_bytes"] = strides.empty() ? 0 : *std::max_element(strides.begin(), strides.end());
    report["inflight"] = {{"mean", busy > 0 ? area / busy : 0.0},
                          {"mean_at_issue", steps ? double(reads) / double(steps) : 0.0},
                          {"reads", reads},
                          {"steps_with_reads", steps},
                          {"busy_seconds", busy},
                          {"note", "client view: mean = records still loading when a layer's fetch returned, "
                                   "time-weighted over the time the layer waits for them; mean_at_issue = new "
                                   "reads per layer step that read any"}};
    report["replay_reuse"] = {{"median_gb", median(reuse_gb)},
                              {"first_reads", first_reads},
                              {"reads_of_records_read_before", reuse_gb.size()}};
    report["iod"] = after;
  }
  priv.stop();

  // Per round: the replay over the mean of the raw passes either side.
  nlohmann::json jr = nlohmann::json::array();
  std::vector<double> ratios_qd, ratios_depth, ratios_matched;
  for (size_t k = 0; k < rounds_done.size(); ++k) {
    const ReplayRound& r = rounds_done[k];
    nlohmann::json j = {{"round", k + 1},
                        {"first_token", r.first_token},
                        {"tokens", r.tokens},
                        {"gb_per_s", r.gb_per_s()},
                        {"bytes_read", r.bytes},
                        {"seconds", r.seconds},
                        {"hits", r.hits},
                        {"misses", r.misses},
                        {"hit_rate", r.hits + r.misses ? double(r.hits) / double(r.hits + r.misses) : 0.0},
                        {"inflight_mean", r.mean_depth()},
                        {"inflight_at_issue", r.mean_burst()},
                        {"reuse_median_gb", median(r.reuse_gb)},
                        {"first_reads", r.first_reads},
                        {"load1", r.load1}};
    if (o.raw) {
      const RawPass &pb = passes[k], &pa = passes[k + 1];
      double q = mean_of({pb.at_qd.gb_per_s, pa.at_qd.gb_per_s});
      j["raw_qd"] = {{"before", pb.at_qd.gb_per_s}, {"after", pa.at_qd.gb_per_s}, {"mean", q}};
      j["ratio_qd"] = q > 0 ? r.gb_per_s() / q : 0.0;
      ratios_qd.push_back(j["ratio_qd"]);
      std::optional<double> db, da;
      if (pb.has_depth) db = pb.at_depth.gb_per_s;
      if (pa.has_depth) da = pa.at_depth.gb_per_s;
      if (depth == o.qd) db = pb.at_qd.gb_per_s, da = pa.at_qd.gb_per_s;  // the depth read is the qd read
      if (db || da) {
        double d = mean_of({db, da});
        j["raw_depth"] = {{"before", db ? nlohmann::json(*db) : nlohmann::json()},
                          {"after", da ? nlohmann::json(*da) : nlohmann::json()},
                          {"mean", d}};
        j["ratio_depth"] = d > 0 ? r.gb_per_s() / d : 0.0;
        ratios_depth.push_back(j["ratio_depth"]);
      }
      // The matched reads: the pass after this round aims at this round's reuse; the pass
      // before it at the round before's (round 1 has only the one after).
      std::optional<double> mb, ma;
      if (pb.has_matched) mb = pb.at_matched.gb_per_s;
      if (pa.has_matched) ma = pa.at_matched.gb_per_s;
      if (mb || ma) {
        double m = mean_of({mb, ma});
        j["raw_matched"] = {{"before", mb ? nlohmann::json(*mb) : nlohmann::json()},
                            {"after", ma ? nlohmann::json(*ma) : nlohmann::json()},
                            {"mean", m}};
        j["ratio_matched"] = m > 0 ? r.gb_per_s() / m : 0.0;
        ratios_matched.push_back(j["ratio_matched"]);
      }
    }
    jr.push_back(j);
  }
  report["rounds"] = jr;
  if (o.raw) {
    nlohmann::json jp = nlohmann::json::array();
    double sum = 0, p50 = 0, p99 = 0;
    size_t dropped = 0;
    std::string why_not;
    for (size_t k = 0; k < passes.size(); ++k) {
      const RawPass& p = passes[k];
      sum += p.at_qd.gb_per_s, p50 += p.at_qd.p50_us, p99 += p.at_qd.p99_us;
      dropped += p.dropped;
      if (!p.dropped && why_not.empty()) why_not = p.why_not_dropped;
      nlohmann::json j = {{"pass", k},
                          {"page_cache_dropped", p.dropped},
                          {"at_qd", raw_json(p.at_qd)},
                          {"reuse_median_gb", median(p.reuse_gb)},
                          {"first_reads", p.first_reads},
                          {"load1", p.load1}};
      if (p.has_depth) j["at_depth"] = raw_json(p.at_depth);
      if (p.has_matched) {
        j["at_matched"] = raw_json(p.at_matched);
        j["at_matched"]["target_reuse_gb"] = p.matched_reuse_gb;
      }
      jp.push_back(j);
    }
    const double n = double(passes.size());
    // Stable fields: gb_per_s/p50/p99 = the mean over the qd reads; before/after = the first
    // and the last pass; ratio_to_raw = the median of the rounds' ratios.
    report["raw"] = {{"gb_per_s", sum / n},
                     {"p50_us", p50 / n},
                     {"p99_us", p99 / n},
                     {"before", raw_json(passes.front().at_qd)},
                     {"after", raw_json(passes.back().at_qd)},
                     {"depth", depth},
                     {"depth_source", o.raw_depth ? "--raw-depth" : "round 1's mean in flight"},
                     {"record_choice", "at_qd, at_depth: coldest first (records the run read longest ago, never "
                                       "read first); at_matched: records drawn with the reuse distances of the "
                                       "round before's reads (what a host cache does for the replay's re-reads)"},
                     {"passes", jp}};
    report["ratio_to_raw"] = median(ratios_qd);
    report["ratio_to_raw_depth"] = median(ratios_depth);
    report["ratio_to_raw_matched"] = median(ratios_matched);
    report["page_cache"] = {{"raw_passes_dropped", dropped}, {"raw_passes", passes.size()}};
    if (!why_not.empty()) report["page_cache"]["why_not"] = why_not;
  }
  if (!replay_drop_why.empty()) report["page_cache"]["replay_why_not"] = replay_drop_why[0];
  report["rounds_count"] = rounds;
  report["load1"] = {{"before", load_before}, {"after", load_average_1min()}};

  if (json) {
    std::printf("%s\n", report.dump(2).c_str());
    return;
  }
  std::printf("iobench %s: %zu tokens x %u layers x top-%u, cache %u slots (%.2f working sets), %s, policy %s\n",
              trace_path.c_str(), trace.tokens(), trace.moe_layers, trace.top_k, report["slots"].get<uint32_t>(),
              report["cache_working_sets"].get<double>(), report["io_path"].get<std::string>().c_str(),
              report["policy"].get<std::string>().c_str());
  std::printf("  hit rate %.1f%%, %.2f GB read in %.2f s = %.3f GB/s, fetch latency p50 %.0f us p99 %.0f us\n",
              100 * report["hit_rate"].get<double>(), report["bytes_read"].get<uint64_t>() / 1e9,
              report["seconds"].get<double>(), report["gb_per_s"].get<double>(),
              report["fetch_latency_us"]["p50"].get<double>(), report["fetch_latency_us"]["p99"].get<double>());
  std::printf("  in flight (client view): mean %.2f (time-weighted), %.2f at issue; replay reads of records read "
              "before: median %.2f GB since\n",
              report["inflight"]["mean"].get<double>(), report["inflight"]["mean_at_issue"].get<double>(),
              report["replay_reuse"]["median_gb"].get<double>());
  if (!o.raw) return;
  std::printf("  raw device: %s %s, coldest records, qd %u and depth %u (%s); page cache dropped before %zu of "
              "%zu raw passes\n",
              platform::kDirectIoName, o.io.c_str(), o.qd, depth, report["raw"]["depth_source"].get<std::string>().c_str(),
              report["page_cache"]["raw_passes_dropped"].get<size_t>(), passes.size());
  std::printf("  %5s %6s %9s %20s %7s %20s %7s %8s %6s %5s %5s\n", "round", "tokens", "replay", "raw qd before/after",
              "ratio", "raw depth bef/aft", "ratio", "matched", "depth", "hits", "load");
  for (const auto& j : jr) {
    auto fmt = [](const nlohmann::json& x) {
      char b[32];
      if (x.is_null()) return std::string("-");
      std::snprintf(b, sizeof b, "%.3f", x.get<double>());
      return std::string(b);
    };
    std::string rq = fmt(j["raw_qd"]["before"]) + "/" + fmt(j["raw_qd"]["after"]);
    std::string rd = j.contains("raw_depth") ? fmt(j["raw_depth"]["before"]) + "/" + fmt(j["raw_depth"]["after"]) : "-";
    std::string ratio_d = j.contains("ratio_depth") ? fmt(j["ratio_depth"]) : "-";
    std::string ratio_m = j.contains("ratio_matched") ? fmt(j["ratio_matched"]) : "-";
    std::printf("  %5zu %6zu %9.3f %20s %7.3f %20s %7s %8s %6.2f %4.0f%% %5.2f\n", j["round"].get<size_t>(),
                j["tokens"].get<size_t>(), j["gb_per_s"].get<double>(), rq.c_str(), j["ratio_qd"].get<double>(),
                rd.c_str(), ratio_d.c_str(), ratio_m.c_str(), j["inflight_mean"].get<double>(),
                100 * j["hit_rate"].get<double>(), j["load1"].get<double>());
  }
  std::printf("  median iod / raw: %.1f%% at qd %u, %.1f%% at depth %u, %.1f%% against reads of the replay's reuse "
              "distance (raw passes: mean %.3f GB/s at qd)\n",
              100 * report["ratio_to_raw"].get<double>(), o.qd, 100 * report["ratio_to_raw_depth"].get<double>(), depth,
              100 * report["ratio_to_raw_matched"].get<double>(), report["raw"]["gb_per_s"].get<double>());
}

}  // namespace waste::iobench
