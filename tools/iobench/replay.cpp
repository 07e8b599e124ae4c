#include "tools/iobench/replay.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "iod/cache/routing_trace.h"
#include "shared/container/reader.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/ipc/shm_segment.h"
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

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, size_t(q * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
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
    std::string prefix = ipc::segment_name(ipc::instance_id_for(dir), 0);
    prefix = prefix.substr(0, prefix.size() - 16);  // "waste-iod-<instance>-"
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0) ipc::ShmSegment::remove(name);
    }
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
  cmd->add_option("--qd", o.qd, "reads in flight, for iod and the raw measurement (default 32)");
  cmd->add_option("--io", o.io, "uring or pread, for a private iod and the raw measurement")
      ->check(CLI::IsMember({"uring", "pread"}));
  cmd->add_option("--lookahead", o.lookahead, "prefetch the next N layers' experts from the trace (default 0)");
  cmd->add_option("--tokens", o.tokens, "replay only the first N tokens");
  cmd->add_flag("!--no-raw", o.raw, "skip the raw device measurement");
}

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

  // The device is measured before and after the replay (a shared or virtual disk drifts); the
  // reference is the mean of the two. Each pass reads up to kRawBytes.
  constexpr uint64_t kRawBytes = 8000000000ull;
  RawResult raw_before;
  if (o.raw) raw_before = measure_raw_device(o.model, o.qd, o.io, kRawBytes);

  nlohmann::json report;
  {
    ipc::ExpertStoreClient client(socket, c.container_id());
    nlohmann::json before = client.stats();
    std::vector<double> fetch_us;
    fetch_us.reserve(trace.tokens() * trace.moe_layers);
    std::vector<ipc::SlotHandle> held;
    const uint32_t L = trace.moe_layers, K = trace.top_k;
    auto t0 = Clock::now();
    for (size_t t = 0; t < trace.tokens(); ++t) {
      for (uint32_t i = 0; i < L; ++i) {
        const uint32_t* ex = trace.layer_experts(t, i);
        auto f0 = Clock::now();
        auto handles = client.fetch(uint32_t(layers[i].layer), {ex, K}, held);
        // The oracle prefetch of the coming layers (what a perfect router predictor would send).
        for (uint32_t a = 1; a <= o.lookahead; ++a) {
          size_t flat = t * L + i + a;
          if (flat >= trace.tokens() * L) break;
          client.prefetch(uint32_t(layers[flat % L].layer), {trace.layer_experts(flat / L, uint32_t(flat % L)), K});
        }
        for (const auto& h : handles) client.wait(h);
        fetch_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - f0).count());
        held = std::move(handles);
      }
    }
    client.release(held);
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    nlohmann::json after = client.stats();
    uint64_t bytes = after["bytes_read"].get<uint64_t>() - before["bytes_read"].get<uint64_t>();
    uint64_t hits = after["hits"].get<uint64_t>() - before["hits"].get<uint64_t>();
    uint64_t misses = after["misses"].get<uint64_t>() - before["misses"].get<uint64_t>();
    report["model"] = o.model;
    report["trace"] = trace_path;
    report["tokens"] = trace.tokens();
    report["moe_layers"] = L;
    report["top_k"] = K;
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
    report["seconds"] = seconds;
    report["gb_per_s"] = seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0;
    report["fetch_latency_us"] = {{"p50", percentile(fetch_us, 0.5)}, {"p99", percentile(fetch_us, 0.99)}};
    report["iod"] = after;
  }
  priv.stop();  // the daemon's cache memory is gone before the raw run

  if (o.raw) {
    RawResult after = measure_raw_device(o.model, o.qd, o.io, kRawBytes);
    auto as_json = [](const RawResult& r) {
      return nlohmann::json{{"gb_per_s", r.gb_per_s}, {"p50_us", r.p50_us}, {"p99_us", r.p99_us},
                            {"reads", r.reads},       {"bytes", r.bytes},   {"seconds", r.seconds}};
    };
    double mean = (raw_before.gb_per_s + after.gb_per_s) / 2;
    report["raw"] = {{"gb_per_s", mean},
                     {"p50_us", (raw_before.p50_us + after.p50_us) / 2},
                     {"p99_us", (raw_before.p99_us + after.p99_us) / 2},
                     {"before", as_json(raw_before)},
                     {"after", as_json(after)}};
    report["ratio_to_raw"] = mean > 0 ? report["gb_per_s"].get<double>() / mean : 0.0;
  }

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
  if (o.raw)
    std::printf("  raw device (O_DIRECT, %s, qd %u): %.3f GB/s (before %.3f, after %.3f), read p50 %.0f us p99 %.0f us; "
                "iod / raw = %.1f%%\n",
                o.io.c_str(), o.qd, report["raw"]["gb_per_s"].get<double>(),
                report["raw"]["before"]["gb_per_s"].get<double>(), report["raw"]["after"]["gb_per_s"].get<double>(),
                report["raw"]["p50_us"].get<double>(), report["raw"]["p99_us"].get<double>(),
                100 * report["ratio_to_raw"].get<double>());
}

}  // namespace waste::iobench
