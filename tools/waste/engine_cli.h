// What `waste eval`, `waste run` and `waste bench` share: the engine options on the command
// line and how the routed experts are served: through iod (one already running at --run-dir,
// else a private waste-iod started for the command and stopped after it), or with --no-iod
// read by compute itself (ContainerExperts).
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "shared/util/option_limits.h"
#include "shared/util/private_dir.h"
#include "compute/engine.h"
#include "compute/experts/iod_experts.h"
#include "compute/experts/resident_experts.h"
#include "tools/iobench/private_iod.h"

namespace waste::cli {

struct EngineCliOptions {
  std::string command;  // "run", "bench", "eval": opens messages (set by add_engine_options)
  std::string model;
  int64_t context = limits::kDefaultContextTokens;
  int chunk = 128;
  int kda_chunk = 1;
  int lookahead = -1;
  bool no_iod = false;
  bool pinned_reads = false;  // through iod: fetch every layer, no unpinned reads (IodExperts)
  std::string run_dir;      // attach to (or start) iod here; empty: a private temporary one
  std::string budget;       // private iod: cache bytes
  uint32_t slots = 0;       // private iod: exact slot count
  double working_sets = 0;  // private iod: slots = one layer in flight + this many token working sets
  bool progress = true;
  bool resident = false;    // every expert read into RAM first (no iod; bench --resident)
  bool usage = true;        // private iod: pre-warm from and update the usage file (bench: off unless --usage)
  std::string timeline;     // Chrome trace of the run (compute spans, and a private iod's reads)
};

// Adds MODEL (positional) and the options above to `cmd`.
void add_engine_options(CLI::App* cmd, EngineCliOptions& o);

// An opened engine and whatever serves its experts; stops a private iod on destruction (SIGKILL
// after a grace period), removes its shared memory should it have been killed, and its temporary
// run directory, then writes the --timeline trace (compute's spans and the private iod's, one
// clock) and removes the parts. A quit signal (tools/waste/quit_signals.h) while the private iod
// starts ends the wait at once (Error); the owner's destructors then do the rest.
class EngineHandle {
 public:
  explicit EngineHandle(const EngineCliOptions& o);
  ~EngineHandle();
  Engine& engine() { return *engine_; }
  bool through_iod() const { return iod_experts_ != nullptr; }
  std::string expert_path() const;  // for messages: "iod (private, 12 slots)" / "in-process reads"
  // Whether the experts' usage file shaped this run: "off (cold start)", "on (...)", or that
  // it is up to the iod that was already running; "none" without iod.
  std::string usage_note() const { return usage_note_; }

 private:
  // Declared before the iod that runs in it: removed after it stops, constructor throw included.
  std::optional<PrivateDir> tmp_run_dir_;
  std::optional<iobench::PrivateIod> private_iod_;
  uint64_t iod_instance_id_ = 0;  // names the private iod's segment (ipc::instance_id_for of its run dir)
  std::unique_ptr<Container> iod_container_;  // the container the expert source reads/checks
  std::unique_ptr<IodExperts> iod_experts_;
  std::unique_ptr<ResidentExperts> resident_;
  std::unique_ptr<Engine> engine_;
  std::string path_note_;
  std::string usage_note_ = "none (no iod)";
  std::string timeline_;      // the merged trace to write at the end
  std::string iod_timeline_;  // the private iod's part (empty: none)
};

}  // namespace waste::cli
