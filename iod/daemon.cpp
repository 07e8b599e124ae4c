#include "iod/daemon.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <kj/async-unix.h>

#include "iod/budget.h"
#include "iod/cache/usage_file.h"
#include "iod/io/check_gate.h"
#include "iod/rpc_server.h"
#include "iod/store.h"
#include "shared/container/reader.h"
#include "shared/ipc/shm_segment.h"
#include "shared/util/error.h"
#include "shared/util/run_dir.h"
#include "shared/util/file.h"
#include "shared/util/progress.h"

namespace waste::iod {

namespace {

// Segments of this instance left behind by a crash (any container): waste-iod-<id>-*.
void remove_stale_segments(uint64_t instance_id) {
  for (const std::string& name : ipc::remove_instance_segments(instance_id))
    spdlog::warn("iod: removed stale segment {} (a previous iod of this run directory did not exit cleanly)", name);
}

// The usage hotlist, when the container's usage file matches it: the policy's prior and the
// records to read at start (hottest first, lowest priority).
struct Hotlist {
  cache::KeyPrior prior;
  std::vector<cache::ExpertKey> hottest;
  cache::UsageCounts counts;  // the file's counts, which this run keeps adding to
};
Hotlist hotlist(const Container& c, const cache::CacheGeometry& g) {
  std::string path = c.dir() + "/" + cache::kUsageFileName;
  if (!path_exists(path)) return {};
  try {
    cache::UsageCounts u = cache::read_usage_file(path);
    if (!u.matches(g) || (u.container_id != 0 && u.container_id != c.container_id())) {
      spdlog::warn("iod: {} is for another container or shape; not using it (it will be replaced)", path);
      return {};
    }
    return {u.prior(g), u.hottest(g.key_count()), u};
  } catch (const Error& e) {
    spdlog::warn("iod: ignoring usage file: {}", e.what());
    return {};
  }
}

// Writes the demand counts back to the container's usage file (temp file + rename), when they
// changed. A container directory iod may not write (read-only fixtures) is said once in the log.
class UsageWriter {
 public:
  UsageWriter(Store& store, const Container& c, bool enabled)
      : store_(store), path_(c.dir() + "/" + cache::kUsageFileName) {
    writable_ = enabled && ::access(c.dir().c_str(), W_OK) == 0;
    if (!enabled) {
      spdlog::info("iod: --no-usage: the usage file is neither used nor saved");
    } else if (!writable_)
      spdlog::warn("iod: {} is not writable; usage counts will not be saved to {}", c.dir(), path_);
  }
  void save(const char* when) {
    if (!writable_) return;
    bool changed = false;
    cache::UsageCounts u = store_.usage_snapshot(&changed);
    if (!changed) return;
    try {
      cache::write_usage_file(path_, u);
      spdlog::info("iod: usage counts ({} tokens) saved to {} ({})", u.tokens, path_, when);
    } catch (const std::exception& e) {
      spdlog::warn("iod: cannot save usage counts to {}: {}", path_, e.what());
    }
  }

 private:
  Store& store_;
  std::string path_;
  bool writable_ = false;
};

// Every kUsageSaveSeconds while serving (a daemon killed with -9 loses at most that much).
constexpr uint64_t kUsageSaveSeconds = 60;
kj::Promise<void> save_usage_periodically(kj::Timer& timer, UsageWriter& w) {
  return timer.afterDelay(kUsageSaveSeconds * kj::SECONDS).then([&timer, &w] {
    w.save("periodic");
    return save_usage_periodically(timer, w);
  });
}

// Test hooks: WASTE_IOD_TEST_URING_FAIL_AFTER=N makes the io_uring ring fail after N reads.
UringFaults uring_faults_from_env() {
  UringFaults f;
  if (const char* v = std::getenv("WASTE_IOD_TEST_URING_FAIL_AFTER"); v && *v) {
    f.fail_after_records = std::strtoull(v, nullptr, 10);
    spdlog::warn("iod: test hook: the io_uring ring fails after {} records", f.fail_after_records);
  }
  // WASTE_IOD_TEST_URING_ABANDON=1 (with the above): the reads the ring holds when it dies are
  // abandoned at once, as if the kernel would neither finish nor cancel them.
  if (const char* v = std::getenv("WASTE_IOD_TEST_URING_ABANDON"); v && std::strcmp(v, "1") == 0) {
    f.abandon_in_flight = true;
    spdlog::warn("iod: test hook: the dying io_uring ring abandons the reads it holds");
  }
  return f;
}

}  // namespace

// --read-chunk: a 4 KiB multiple (a chunk is an O_DIRECT read of its own), up to kMaxReadChunk,
// or 0 for whole records.
uint64_t read_chunk_bytes(const std::string& text) {
  const uint64_t n = parse_size(text, "--read-chunk");
  if (n % 4096 != 0 || n > kMaxReadChunk)
    throw Error("--read-chunk " + text + ": must be 0 (whole records) or a multiple of 4 KiB up to " +
                    std::to_string(kMaxReadChunk >> 20) + " MiB",
                ErrorKind::InvalidRequest, "--read-chunk");
  return n;
}

int run_daemon(const DaemonOptions& o) {
  // Signals first, before any thread exists, so every thread inherits them blocked and the
  // event loop is the one that sees them.
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGINT);
  std::signal(SIGPIPE, SIG_IGN);

  RunDirClaim run(o.run_dir, kLockName, kSocketName, "iod");
  Container container = Container::open(o.model);
  uint64_t instance = ipc::instance_id_for(o.run_dir);
  remove_stale_segments(instance);

  cache::CacheGeometry g = cache::CacheGeometry();
  uint64_t largest = 0;
  {
    std::vector<uint32_t> layers;
    uint32_t experts = 0;
    for (const auto& l : container.expert_layers()) {
      layers.push_back(uint32_t(l.layer));
      experts = std::max(experts, l.expert_count);
      largest = std::max(largest, l.layout.stride);
    }
    require(!layers.empty(), o.model + ": no MoE layers, nothing for iod to serve");
    g = cache::CacheGeometry(layers, experts, uint32_t(std::max(1, container.config().top_k)));
  }
  ComputeShape shape;
  shape.context = uint64_t(o.context);
  shape.sessions = uint32_t(o.sessions);
  if (o.threads > 0) shape.threads = uint32_t(o.threads);
  shape.http_front_end = o.http_front_end;
  shape.prompt_cache = o.prompt_cache;
  shape.image_patches = uint64_t(o.image_patches);
  CacheBudget budget = plan_cache(container, o.budget, o.slots, ipc::segment_layout(1, largest).slot_bytes, g.top_k(),
                                  g.key_count(), shape);
  spdlog::info("iod: {} ({} MoE layers x {} experts), cache {}", o.model, g.moe_layer_count(),
               g.experts_per_layer(), budget.breakdown);
  if (!budget.warning.empty()) spdlog::warn("{}", budget.warning);

  StoreOptions so;
  so.slots = budget.slots;
  so.io = o.io;
  so.shm = ipc::parse_segment_backing(o.shm);
  so.queue_depth = o.queue_depth;  // main bounds it (1-256)
  so.read_chunk = o.read_chunk.empty() ? (o.io == "pread" ? 0 : kDefaultReadChunk) : read_chunk_bytes(o.read_chunk);
  if (so.read_chunk != 0 && o.io == "pread")
    throw Error("--read-chunk " + o.read_chunk + ": the pread pool reads whole records (chunks are an io_uring mode)",
                ErrorKind::InvalidRequest, "--read-chunk");
  so.policy = o.policy.empty() ? cache::kDefaultPolicy : o.policy;
  Hotlist hot = o.usage ? hotlist(container, g) : Hotlist{};
  so.prior = hot.prior;
  so.usage = hot.counts;
  so.uring_faults = uring_faults_from_env();
  if (const char* v = std::getenv("WASTE_IOD_TEST_EIO"); v && *v) {
    so.read_faults = parse_read_faults(v);
    spdlog::warn("iod: test hook: reads of {} read back as EIO", v);
  }
  std::unique_ptr<CheckGate> check_gate;  // outlives the store, whose checker thread calls it
  if (const char* v = std::getenv("WASTE_IOD_TEST_CHECK_GATE"); v && *v) {
    check_gate = std::make_unique<CheckGate>(v);
    so.before_payload_check = [g = check_gate.get()] { g->pass(); };
    spdlog::warn("iod: test hook: each record's checksum waits for the FIFO {}", v);
  }
  Store store(container, ipc::segment_name(instance, container.container_id()), instance, so);
  UsageWriter usage(store, container, o.usage);
  if (!o.trace.empty()) store.trace_start(std::filesystem::absolute(o.trace).string());
  if (o.prewarm) {
    uint32_t n = store.prewarm(hot.hottest);
    if (n) spdlog::info("iod: pre-warming {} records from the usage file", n);
  }

  auto io = kj::setupAsyncIo();
  auto serving = serve_expert_store(store, io, run.socket_path());
  spdlog::info("iod: serving {} on {} (segment {})", o.model, run.socket_path(), store.segment().name());
  auto stop = io.unixEventPort.onSignal(SIGTERM).exclusiveJoin(io.unixEventPort.onSignal(SIGINT));
  // A failure of the accept loop ends the daemon as well (then the signal promise is dropped).
  auto failed = serving.then([]() -> siginfo_t { return {}; });
  auto saving = save_usage_periodically(io.provider->getTimer(), usage).then([]() -> siginfo_t { return {}; });
  siginfo_t sig = stop.exclusiveJoin(kj::mv(failed)).exclusiveJoin(kj::mv(saving)).wait(io.waitScope);
  spdlog::info("iod: signal {} received, shutting down", sig.si_signo);
  store.shutdown();
  usage.save("shutdown");
  if (!o.trace.empty()) store.trace_stop();
  return 0;
}

}  // namespace waste::iod
