#include "tools/waste/engine_cli.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "shared/ipc/shm_segment.h"
#include "shared/util/error.h"
#include "shared/util/progress.h"
#include "shared/util/timeline.h"
#include "tools/waste/option_checks.h"
#include "tools/waste/quit_signals.h"

namespace waste::cli {

namespace {
// More working sets than this hold more records than any model has experts (K3: 48 cover all).
constexpr double kMaxWorkingSets = 1024;
}  // namespace

void add_engine_options(CLI::App* cmd, EngineCliOptions& o) {
  o.command = cmd->get_name();
  cmd->add_option("model", o.model, "Container directory (.waste)")->required();
  namespace lim = limits;
  cmd->add_option("--ctx", o.context, "Session context in tokens (4096; 1 to 16777216)")
      ->check(CLI::Range(int64_t(1), lim::kMaxContextTokens));
  cmd->add_option("--chunk", o.chunk, "Prefill chunk in tokens (128): each chunk fetches the union of its experts once");
  cmd->add_option("--kda-chunk", o.kda_chunk,
                  "KDA prefill: tokens per chunk of the chunked delta rule, 1 to " + std::to_string(kMaxKdaChunk) +
                      " (16 is faster; 1, the default: the recurrence, logits independent of --chunk)")
      ->check(CLI::Range(1, kMaxKdaChunk));
  cmd->add_option("--lookahead", o.lookahead, "Experts prefetched per token for the next layer (default top_k / 2, 0: off)");
  CLI::Option* no_iod = cmd->add_flag("--no-iod", o.no_iod, "Read experts in this process instead of through waste-iod");
  cmd->add_flag("--pinned-reads", o.pinned_reads,
                "Through iod: fetch and pin every layer's experts even when all are READY in slots already "
                "(default: such a layer is read unpinned, checked after, and reported in one message per 16 tokens)")
      ->excludes(no_iod);
  cmd->add_option("--run-dir", o.run_dir, "iod run directory: attach to the iod running there, else start one there");
  // Three ways to size a private iod's cache: one at a time, so none is dropped unsaid.
  CLI::Option* budget = cmd->add_option("--budget", o.budget, "Expert cache of a private iod (bytes: 4G, 900M, ...)");
  CLI::Option* slots = cmd->add_option("--slots", o.slots, "Exact cache slots of a private iod (instead of --budget)");
  CLI::Option* sets = cmd->add_option(
      "--working-sets", o.working_sets,
      "Private iod cache in token working sets (MoE layers x top_k records) beyond one layer in flight (0 to " +
          std::to_string(int(kMaxWorkingSets)) + ")");
  sets->check(finite_range(0, kMaxWorkingSets));
  budget->excludes(slots)->excludes(sets);
  slots->excludes(sets);
  cmd->add_option("--timeline", o.timeline,
                  "Write a Chrome trace (Perfetto, chrome://tracing) of this run: compute's phases per layer and "
                  "expert, and a private iod's reads, on one clock");
  cmd->add_flag("!--no-progress", o.progress, "No progress bar");
}

EngineHandle::EngineHandle(const EngineCliOptions& o) {
  EngineOptions eo;
  eo.model = o.model;
  eo.context = o.context;
  eo.prefill_chunk = o.chunk;
  eo.kda_chunk = o.kda_chunk;
  eo.lookahead = o.lookahead;
  eo.progress = o.progress;
  timeline_ = o.timeline;
  if (o.resident) {
    iod_container_ = std::make_unique<Container>(Container::open(o.model));
    resident_ = std::make_unique<ResidentExperts>(*iod_container_, o.progress);
    eo.experts = resident_.get();
    path_note_ = "resident in RAM (" + format_bytes(double(resident_->resident_bytes())) + ")";
  } else if (!o.no_iod) {
    iod_container_ = std::make_unique<Container>(Container::open(o.model));
    std::string socket;
    bool running = false;
    if (!o.run_dir.empty()) {
      socket = o.run_dir + "/iod.sock";
      running = std::filesystem::exists(socket) && iobench::wait_for_socket(socket, 0, 0.5);
    }
    if (running) {
      path_note_ = "iod at " + o.run_dir;
      usage_note_ = "as the running iod at " + o.run_dir + " was started";
    } else {
      std::string run = o.run_dir;
      if (run.empty()) run = tmp_run_dir_.emplace("waste-run").path();
      // The private iod plans for this command's context (the floor holds its session state) and
      // for no prompt cache (only waste-compute keeps one: here its bytes go to cache slots);
      // unless asked, it leaves the usage file alone: a benchmark starts cold and records nothing.
      std::vector<std::string> args = {"--model", o.model, "--ctx", std::to_string(o.context), "--prompt-cache", "0"};
      if (!o.usage) args.push_back("--no-usage");
      usage_note_ = o.usage ? "on (prior and pre-warm from " + o.model + "/usage, updated at the end)"
                            : "off (cold start: no prior, no pre-warm, nothing recorded)";
      uint32_t slots = o.slots;
      if (slots == 0 && o.working_sets > 0) {
        const ModelConfig& c = iod_container_->config();
        const double ws = double(iod_container_->expert_layers().size()) * c.top_k;
        slots = uint32_t(c.top_k + o.working_sets * ws + 0.5);
      }
      if (slots > 0) args.insert(args.end(), {"--slots", std::to_string(slots)});
      else if (!o.budget.empty()) args.insert(args.end(), {"--budget", o.budget});
      if (!timeline_.empty()) {
        iod_timeline_ = timeline_ + ".iod.part";
        args.insert(args.end(), {"--timeline", iod_timeline_});
      }
      // The daemon's log reaches our stderr through PrivateIod (command output, `--json` or
      // generated text, stays clean on stdout). When it refuses to start, the options this
      // command passed on are named with its reason (a bad --budget, --slots or --ctx).
      try {
        private_iod_.emplace(args, run, 120, &quit::requested, o.command);
      } catch (const Error& e) {
        std::string given;
        if (o.slots > 0) given += " --slots " + std::to_string(o.slots);
        if (o.working_sets > 0) given += " --working-sets " + short_number(o.working_sets) + " (" + std::to_string(slots) + " slots)";
        if (!o.budget.empty()) given += " --budget " + o.budget;
        given += " --ctx " + std::to_string(o.context);
        throw Error(std::string(e.what()) + " [with" + given + "]");
      }
      socket = private_iod_->socket_path();
      iod_instance_id_ = ipc::instance_id_for(run);
      path_note_ = "private iod (" + iobench::find_iod_binary() + ")";
    }
    iod_experts_ = std::make_unique<IodExperts>(*iod_container_, socket);
    iod_experts_->set_unpinned_reads(!o.pinned_reads);
    path_note_ += ", " + std::to_string(iod_experts_->slot_count()) + " slots" +
                  (o.pinned_reads ? ", every layer fetched and pinned" : "");
    eo.experts = iod_experts_.get();
  } else {
    path_note_ = "in-process reads";
  }
  engine_ = std::make_unique<Engine>(eo);
  // Last: a constructor that throws runs no destructor, which would leave a recording on and
  // its part file behind. (The trunk load before this point records no spans anyway.)
  if (!timeline_.empty()) timeline::start(timeline_ + ".compute.part", "waste (compute)");
}

EngineHandle::~EngineHandle() {
  engine_.reset();
  iod_experts_.reset();
  resident_.reset();
  if (private_iod_) {
    private_iod_->stop();  // the daemon writes its trace part as it exits
    // A cleanly stopped iod has removed its segment; one killed after the grace period has not.
    ipc::remove_instance_segments(iod_instance_id_);
  }
  private_iod_.reset();
  tmp_run_dir_.reset();
  if (!timeline_.empty()) {
    try {
      timeline::stop();
      std::vector<std::string> parts = {timeline_ + ".compute.part"};
      std::error_code ec;
      if (!iod_timeline_.empty() && std::filesystem::exists(iod_timeline_, ec)) parts.push_back(iod_timeline_);
      timeline::merge(timeline_, parts.data(), parts.size());
      for (const auto& p : parts) std::filesystem::remove(p, ec);
      std::fprintf(stderr, "timeline: %s (%s)\n", timeline_.c_str(),
                   parts.size() > 1 ? "compute and iod" : "compute only");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "timeline: %s\n", e.what());  // a destructor must not throw
    }
  }
}

std::string EngineHandle::expert_path() const { return path_note_; }

}  // namespace waste::cli
