// `waste iobench MODEL --trace T`: replays a routing trace through a running iod (or a private
// one it starts) the way compute drives it (per token, per MoE layer: fetch, wait READY,
// release), with no model math, and measures the raw device in the same run, interleaved:
// raw, replay slice 1, raw, replay slice 2, ..., raw. Each raw pass (page cache dropped first)
// reads whole records of the same bank files with direct I/O, the coldest ones (record_ages.h),
// at the configured qd and at the mean depth the replay kept in flight; each round's ratio is
// its replay rate over the mean of the raw passes either side, and the report gives the median.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "iod/io/io_choice.h"
#include "tools/iobench/record_ages.h"

namespace waste::iobench {

struct ReplayOptions {
  std::string model;
  std::string run_dir;        // attach to the iod there; empty = start a private one
  std::string budget;         // private iod: cache bytes or auto
  double cache_ws = 1.0;      // private iod: cache size in token working sets when no --budget
  uint32_t qd = 32;
  std::string io = iod::kDefaultIo;  // "uring" or "pread" (iod/io/io_choice.h)
  uint32_t lookahead = 0;     // prefetch the next N layers' experts from the trace (an oracle hint)
  size_t tokens = 0;          // replay only the first N tokens (0 = all)
  bool raw = true;            // measure the raw device between the replay rounds
  uint32_t rounds = 5;        // the trace is replayed in this many consecutive slices (one warm cache)
  double raw_gb = 2.0;        // GB per raw read pass (one at qd, one at the replay's depth)
  double raw_seconds = 5.0;   // at most this long per raw read pass
  uint32_t raw_depth = 0;     // depth of the second raw read; 0 = the replay's measured mean in flight
  bool drop_caches = true;    // drop the page cache (platform::drop_page_cache) before every pass
};

// Adds MODEL and the replay options to the iobench subcommand.
void add_replay_options(CLI::App* cmd, ReplayOptions& o);
// Runs the replay and prints the report (text or JSON). policy: for a private iod.
void run_replay(const ReplayOptions& o, const std::string& trace_path, const std::string& policy, bool json);

// The pieces, for tests and tools.
struct RawResult {
  double gb_per_s = 0, p50_us = 0, p99_us = 0, seconds = 0;
  uint64_t reads = 0, bytes = 0;
  uint32_t depth = 0;  // reads kept in flight
  bool fixed_buffers = false;  // io_uring with registered buffers (READ_FIXED, as iod reads)
};
// Direct reads of random records (stride = each bank's record stride) over the banks, qd in
// flight, until `bytes` are read; io "uring" or "pread".
RawResult measure_raw_device(const std::string& model, uint32_t qd, const std::string& io, uint64_t bytes);
// Direct reads of the given records (bank = MoE position), in order, qd in flight; no read
// starts after max_seconds (0: no limit), so `reads` may be fewer than records.size().
RawResult measure_raw_records(const std::string& model, const std::vector<RecordRef>& records, uint32_t qd,
                              const std::string& io, double max_seconds);

// `--read-records FILE`: the records listed ("layer expert" a line) read in order at o.qd
// through o.io, the last `timed_last` of them timed apart (0: all); prints the rate.
void run_read_records(const ReplayOptions& o, const std::string& list_path, uint64_t timed_last, bool json);

// Dropping the page cache before a pass: platform::drop_page_cache (shared/platform/direct_io.h).

}  // namespace waste::iobench
