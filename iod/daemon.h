// waste-iod: start-up (run directory, instance lock, stale segment/socket clean-up, cache
// budget), the event loop serving ExpertStore, and orderly shutdown on SIGTERM/SIGINT.
#pragma once
#include <cstdint>
#include <string>

#include "iod/io/io_choice.h"
#include "iod/io/read_engine.h"
#include "shared/image/image_budget.h"
#include "shared/util/option_limits.h"

namespace waste::iod {

struct DaemonOptions {
  std::string model, run_dir;
  std::string budget = "auto";  // cache bytes ("4G", ...) or "auto"
  uint32_t slots = 0;           // exact slot count (overrides --budget)
  int64_t context = limits::kDefaultContextTokens;  // compute's --ctx: the planner counts its session state
  int sessions = limits::kDefaultLiveSessions;  // compute's --sessions: session states the planner counts
  int threads = 0;  // compute's --threads (0: its default, this machine's): the planner counts each one's buffers
  bool http_front_end = false;  // waste-serve runs in the instance (waste up --http): the planner counts its base
  int image_patches = kDefaultImagePatches;  // compute's --image-patches: the planner counts one such image
  std::string prompt_cache = "auto";  // compute's prompt-cache bytes, counted by the planner ("auto": its default)
  std::string io = kDefaultIo;  // "uring" or "pread" (iod/io/io_choice.h)
  std::string shm = "auto";     // the segment's backing (ipc::parse_segment_backing)
  uint32_t queue_depth = 32;
  // io_uring: a record is read in reads of at most this many bytes ("0": whole records; empty:
  // kDefaultReadChunk, and whole records on the pread pool)
  std::string read_chunk;
  std::string policy;
  std::string trace;            // trace every request from the start
  bool prewarm = true;
  bool usage = true;            // use (prior, pre-warm) and save the container's usage file
};

// --read-chunk's bytes: 0 (whole records) or a 4 KiB multiple up to kMaxReadChunk. Throws Error
// naming the flag.
uint64_t read_chunk_bytes(const std::string& text);

// Runs until SIGTERM/SIGINT; returns the exit status. Throws Error for bad start-up input.
int run_daemon(const DaemonOptions& o);

constexpr const char* kSocketName = "iod.sock";
constexpr const char* kLockName = "iod.lock";

}  // namespace waste::iod
