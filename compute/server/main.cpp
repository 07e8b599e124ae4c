// waste-compute: holds the engine (trunk, tokenizer, sessions) and serves Engine
// (proto/engine.capnp) on <run-dir>/compute.sock for any number of front ends (docs/PROTOCOL.md).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <spdlog/spdlog.h>

#include "shared/image/image_budget.h"
#include "compute/server/engine_service.h"
#include "shared/plan/memory_plan.h"
#include "compute/server/rpc_server.h"
#include "shared/util/error.h"
#include "shared/util/option_limits.h"
#include "shared/util/run_dir.h"
#include "shared/util/progress.h"
#include "shared/util/timeline.h"

namespace {

constexpr const char* kSocketName = "compute.sock";
constexpr const char* kLockName = "compute.lock";

int run(waste::server::ServiceOptions so, const std::string& run_dir, const std::string& tcp, bool no_iod,
        const std::string& timeline_path) {
  // Signals first, before any thread exists, so every thread inherits them blocked and the
  // event loop is the one that sees them.
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGINT);
  std::signal(SIGPIPE, SIG_IGN);

  waste::RunDirClaim dir(run_dir, kLockName, kSocketName, "waste-compute");
  if (so.iod_socket.empty() && !no_iod) {
    const std::string s = run_dir + "/iod.sock";
    if (std::filesystem::exists(s)) so.iod_socket = s;
  }
  if (so.iod_socket.empty())
    spdlog::info("compute: no iod (--iod not given and no {}/iod.sock): reading experts in-process", run_dir);
  if (!timeline_path.empty()) {
    waste::timeline::start(timeline_path, "waste-compute");
    spdlog::info("compute: recording a timeline to {} (written at shutdown)", timeline_path);
  }
  spdlog::info("compute: opening {}", so.model);
  waste::server::EngineService service(so);
  spdlog::info("compute: {} layers, vocab {}, trunk {}, experts: {}", service.config().n_layers, service.config().vocab,
               waste::format_bytes(double(service.trunk_bytes())), service.expert_path());

  auto io = kj::setupAsyncIo();
  auto& network = io.provider->getNetwork();
  auto addr = network.parseAddress(("unix:" + dir.socket_path()).c_str()).wait(io.waitScope);
  auto listener = addr->listen();
  waste::require(::chmod(dir.socket_path().c_str(), 0600) == 0, "compute: cannot chmod " + dir.socket_path());
  kj::Promise<void> serving = waste::server::serve_engine(service, kj::mv(listener), true, io.unixEventPort);
  kj::Promise<void> serving_tcp = kj::NEVER_DONE;
  if (!tcp.empty()) {
    // Only when asked: anyone who can reach the address can use the engine.
    auto taddr = network.parseAddress(tcp.c_str()).wait(io.waitScope);
    serving_tcp = waste::server::serve_engine(service, taddr->listen(), false, io.unixEventPort);
    spdlog::warn("compute: also serving on tcp {} (no authentication)", tcp);
  }
  spdlog::info("compute: serving on {}", dir.socket_path());

  auto stop = io.unixEventPort.onSignal(SIGTERM).exclusiveJoin(io.unixEventPort.onSignal(SIGINT));
  auto failed = serving.exclusiveJoin(kj::mv(serving_tcp)).then([]() -> siginfo_t { return {}; });
  siginfo_t sig = stop.exclusiveJoin(kj::mv(failed)).wait(io.waitScope);
  spdlog::info("compute: signal {} received, shutting down", sig.si_signo);
  // Connections are gone with `serving` (dropped above); now let the worker end its requests
  // while this loop still runs to take their last callbacks.
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
  service.stop([f] { (*f)->fulfill(); });
  paf.promise.wait(io.waitScope);
  if (!timeline_path.empty())
    spdlog::info("compute: timeline: {} events written to {}", waste::timeline::stop(), timeline_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  waste::server::ServiceOptions so;
  std::string run_dir, tcp, timeline_path;
  int threads = 0;
  bool no_iod = false;
  CLI::App app{"waste-compute: the engine (trunk, sessions) serving Engine RPC to front ends"};
  app.add_option("--model", so.model, "container directory (.waste)")->required();
  app.add_option("--run-dir", run_dir, "run directory (compute.sock, lock; created 0700)")->required();
  app.add_option("--iod", so.iod_socket, "iod socket (default: <run-dir>/iod.sock when it exists)");
  app.add_flag("--no-iod", no_iod, "read experts in this process even when an iod runs in the run dir");
  namespace lim = waste::limits;
  app.add_option("--ctx", so.context, "default session context in tokens (4096)")
      ->check(CLI::Range(int64_t(1), lim::kMaxContextTokens));
  app.add_option("--max-ctx", so.max_context, "largest session context a client may ask for (default: --ctx)")
      ->check(CLI::Range(int64_t(1), lim::kMaxContextTokens));
  app.add_option("--threads", threads, "compute threads (default: all cores, or WASTE_THREADS)")
      ->check(CLI::Range(1, lim::kMaxThreads));
  app.add_option("--max-sessions", so.max_sessions, "open sessions at most (" + std::to_string(lim::kDefaultMaxSessions) + ")")->check(CLI::Range(1, lim::kMaxSessions));
  app.add_option("--sessions", so.live_sessions,
                 "session states in memory at once, what the memory plan counts (iod --sessions; " +
                     std::to_string(lim::kDefaultLiveSessions) +
                     "): other sessions' requests wait, and idle sessions' states are parked on disk")
      ->check(CLI::Range(1, lim::kMaxSessions));
  app.add_option("--park-dir", so.park_dir,
                 "directory for parked session states (a private directory is made in it; default: $TMPDIR or /var/tmp)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--max-queued", so.max_queued, "generate requests queued or running at most (32)")
      ->check(CLI::Range(1, lim::kMaxQueued));
  app.add_option("--chunk", so.prefill_chunk, "prefill chunk in tokens when no session is decoding (128)")
      ->check(CLI::PositiveNumber);
  app.add_option("--image-patches", so.image_patches,
                 "patch budget per image when a request gives none (1024: at most 256 image tokens; each image "
                 "token costs a text token's prefill)")
      ->check(CLI::Range(waste::kMinImagePatches, waste::kMaxImagePatches));
  app.add_option("--chunk-beside-decoders", so.prefill_chunk_beside_decoders,
                 "prefill chunk in tokens while other sessions decode (32)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-batch", so.max_batch, "sessions per forward step at most (0: every ready session; 1: unbatched)")
      ->check(CLI::Range(0, lim::kMaxBatch));
  app.add_option("--cache", so.in_process_cache_bytes, "in-process record cache bytes when there is no iod");
  std::string prompt_cache = "auto";
  app.add_option("--prompt-cache", prompt_cache,
                 "bytes of prompt-cache checkpoints (4G, 512M, ...; 0: off; auto: two full-context session "
                 "states, at least 64 MiB)");
  app.add_option("--iod-timeout", so.iod_timeout_ms,
                 "ms a call to iod may wait for its answer before the requests that need it fail (10000)")
      ->check(CLI::Range(int64_t(1), int64_t(3'600'000)));
  app.add_option("--iod-wait", so.iod_wait_ms, "ms to wait at start for iod to answer before giving up (30000)")
      ->check(CLI::Range(int64_t(0), int64_t(3'600'000)));
  app.add_option("--tcp", tcp, "also listen on this TCP address (host:port); unauthenticated");
  app.add_option("--timeline", timeline_path,
                 "record a Chrome trace (phases per layer and expert) and write it here at shutdown; "
                 "merge with iod's with `waste timeline merge`");
  CLI11_PARSE(app, argc, argv);
  if (prompt_cache != "auto") {
    try {
      so.prompt_cache_bytes = waste::plan::parse_size(prompt_cache);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "--prompt-cache: %s\n", e.what());
      return 2;
    }
  }
  if (const char* v = std::getenv("WASTE_COMPUTE_TEST_START_GATE"); v && *v) {
    so.start_gate = std::strtoul(v, nullptr, 10);
    spdlog::warn("compute: test hook: no step runs until {} requests are running", so.start_gate);
  }
  if (const char* v = std::getenv("WASTE_COMPUTE_TEST_REPLY"); v && *v) {
    so.test_reply = v;
    spdlog::warn("compute: test hook: every reply is the ids of {:?}", so.test_reply);
  }
  if (const char* v = std::getenv("WASTE_COMPUTE_TEST_STEP_GATE"); v && *v) {
    so.step_gate = v;
    spdlog::warn("compute: test hook: steps run only as the FIFO {} lets them", so.step_gate);
  }
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  // The global pool reads WASTE_THREADS when first used.
  if (threads > 0) ::setenv("WASTE_THREADS", std::to_string(threads).c_str(), 1);
  try {
    return run(so, run_dir, tcp, no_iod, timeline_path);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
