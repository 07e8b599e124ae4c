// `waste iobench MODEL --trace T`: replays a routing trace through a running iod (or a private
// one it starts) the way compute drives it (per token, per MoE layer: fetch, wait READY,
// release), with no model math, then measures the raw device in the same run (direct reads of
// the same record size at the same queue depth over the same bank files) and reports the ratio.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace waste::iobench {

struct ReplayOptions {
  std::string model;
  std::string run_dir;        // attach to the iod there; empty = start a private one
  std::string budget;         // private iod: cache bytes or auto
  double cache_ws = 1.0;      // private iod: cache size in token working sets when no --budget
  uint32_t qd = 32;
  std::string io = "uring";
  uint32_t lookahead = 0;     // prefetch the next N layers' experts from the trace (an oracle hint)
  size_t tokens = 0;          // replay only the first N tokens (0 = all)
  bool raw = true;            // measure the raw device after the replay
};

// Adds MODEL and the replay options to the iobench subcommand.
void add_replay_options(CLI::App* cmd, ReplayOptions& o);
// Runs the replay and prints the report (text or JSON). policy: for a private iod.
void run_replay(const ReplayOptions& o, const std::string& trace_path, const std::string& policy, bool json);

// The pieces, for tests and tools.
struct RawResult {
  double gb_per_s = 0, p50_us = 0, p99_us = 0, seconds = 0;
  uint64_t reads = 0, bytes = 0;
};
// Direct reads of random records (stride = each bank's record stride) over the banks, qd in
// flight, until `bytes` are read; io "uring" or "pread".
RawResult measure_raw_device(const std::string& model, uint32_t qd, const std::string& io, uint64_t bytes);

}  // namespace waste::iobench
