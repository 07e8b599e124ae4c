// waste-iod: the I/O daemon (see iod/daemon.h, docs/PROTOCOL.md).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "iod/cache/policy.h"
#include "iod/daemon.h"
#include "iod/io/io_choice.h"
#include "shared/ipc/shm_segment.h"
#include "shared/util/error.h"
#include "shared/util/timeline.h"

int main(int argc, char** argv) {
  waste::iod::DaemonOptions o;
  CLI::App app{"waste-iod: serves a container's experts from NVMe through a shared-memory cache"};
  app.add_option("--model", o.model, "container directory (.waste)")->required();
  app.add_option("--run-dir", o.run_dir, "run directory (socket, lock; created 0700)")->required();
  app.add_option("--budget", o.budget, "memory budget in bytes (48G, ...; split by the memory planner) or auto");
  app.add_option("--slots", o.slots,
                 "exact number of cache slots instead of --budget (the planner's floor for --ctx, --sessions, ... is "
                 "still logged with the total)");
  app.add_option("--image-patches", o.image_patches,
                 "compute's --image-patches, whose one image's activations the planner leaves room for (1024)")
      ->check(CLI::Range(waste::kMinImagePatches, waste::kMaxImagePatches));
  namespace lim = waste::limits;
  app.add_option("--ctx", o.context, "compute's --ctx, whose session state the planner counts (4096)")
      ->check(CLI::Range(int64_t(1), lim::kMaxContextTokens));
  app.add_option("--sessions", o.sessions, "compute's --sessions: session states in memory at once, which the planner counts (1)")
      ->check(CLI::Range(1, lim::kMaxSessions));
  app.add_option("--threads", o.threads,
                 "compute's --threads, each of whose expert buffers the planner counts (default: all cores, or "
                 "WASTE_THREADS)")
      ->check(CLI::Range(1, lim::kMaxThreads));
  app.add_flag("--http-front-end", o.http_front_end,
               "the instance runs waste-serve beside compute (waste up --http): the planner counts its memory");
  app.add_option("--prompt-cache", o.prompt_cache,
                 "compute's prompt-cache bytes, which the planner leaves room for (auto: the planner's default)");
  app.add_option("--io", o.io,
                 std::string("uring (falls back to pread when the kernel refuses it) or pread; default ") +
                     waste::iod::kDefaultIo + (waste::iod::kHaveUring ? "" : " (built without io_uring)"))
      ->check(waste::iod::io_choice_problem);
  app.add_option("--shm", o.shm,
                 "where the expert cache lives: auto (/dev/shm when it gives huge pages, else a private file on 2 MiB "
                 "pages in a user namespace's tmpfs, else /dev/shm on 4 KiB pages), huge-file (the private file or "
                 "an error) or named (/dev/shm)")
      ->check(waste::ipc::segment_backing_problem);
  app.add_option("--qd", o.queue_depth, "reads in flight (io_uring queue depth / pread threads), 1-256 (32)")
      ->check(CLI::Range(1u, 256u));
  app.add_option("--read-chunk", o.read_chunk,
                 "io_uring: read a record in reads of at most this many bytes (a 4 KiB multiple: 1M, 512K, ...; 0 "
                 "reads whole records), submitted record by record so records land one after another (default " +
                     std::to_string(waste::iod::kDefaultReadChunk >> 20) + "M)")
      ->check([](const std::string& v) -> std::string {
        try {
          waste::iod::read_chunk_bytes(v);
          return "";
        } catch (const waste::Error& e) {
          return e.what();
        }
      });
  app.add_option("--policy", o.policy, waste::cache::policy_help());
  app.add_option("--trace", o.trace, "write every request to this file (JSON lines)");
  std::string timeline_path;
  app.add_option("--timeline", timeline_path,
                 "record a Chrome trace of reads (queued, read, prefetch used) and write it here at exit; "
                 "merge with compute's with `waste timeline merge`");
  bool no_prewarm = false;
  app.add_flag("--no-prewarm", no_prewarm, "do not read the usage file's hottest records at start");
  bool no_usage = false;
  app.add_flag("--no-usage", no_usage,
               "ignore the container's usage file: no prior, no pre-warm, demand counts not saved (benchmarks)");
  CLI11_PARSE(app, argc, argv);
  o.prewarm = !no_prewarm;
  o.usage = !no_usage;
  // A daemon logs to stderr: stdout stays free for whoever started it (waste iobench --json).
  spdlog::set_default_logger(spdlog::stderr_color_mt("iod"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  // Writes the trace on every way out of main (a clean stop or an error).
  struct TimelineWriter {
    std::string path;
    ~TimelineWriter() {
      if (path.empty()) return;
      try {
        spdlog::info("iod: timeline: {} events written to {}", waste::timeline::stop(), path);
      } catch (const std::exception& e) {
        spdlog::error("iod: {}", e.what());
      }
    }
  } writer;
  try {
    if (!timeline_path.empty()) {
      waste::timeline::start(timeline_path, "waste-iod");
      writer.path = timeline_path;
    }
    return waste::iod::run_daemon(o);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
