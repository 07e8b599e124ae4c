// `waste timeline merge OUT IN...`: joins the Chrome traces that waste-compute, waste-iod and
// `waste bench/run --timeline` write (one clock, CLOCK_MONOTONIC, so they line up) into one
// file for Perfetto or chrome://tracing.
#include <cstdio>
#include <string>
#include <vector>

#include "shared/util/timeline.h"
#include "tools/waste/commands.h"

namespace waste::cli {

void register_timeline_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("timeline", "Chrome-trace timelines of compute and iod");
  cmd->require_subcommand(1);
  CLI::App* merge = cmd->add_subcommand("merge", "Join trace files of several processes into one (one clock)");
  auto out = std::make_shared<std::string>();
  auto ins = std::make_shared<std::vector<std::string>>();
  merge->add_option("out", *out, "Merged trace to write")->required();
  merge->add_option("inputs", *ins, "Trace files (waste-compute --timeline, waste-iod --timeline)")->required();
  merge->callback([out, ins] {
    timeline::merge(*out, ins->data(), ins->size());
    std::printf("%s: %zu traces merged\n", out->c_str(), ins->size());
  });
}

}  // namespace waste::cli
