// Each command group registers its subcommands on the `waste` app. A command's callback
// throws waste::Error for bad input; main prints it and exits 1.
#pragma once
#include <CLI/CLI.hpp>

namespace waste::cli {

void register_container_commands(CLI::App& app);  // info, verify   (tools/waste/cmd_container.cpp)
void register_synth_command(CLI::App& app);       // synth          (tools/synth/)

}  // namespace waste::cli
