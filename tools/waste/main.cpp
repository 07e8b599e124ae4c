// `waste`: the command-line front door. Each subcommand lives in its own file.
#include <cstdio>
#include <exception>

#include "shared/util/error.h"
#include "tools/waste/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"WASTE: Weight-Aware Streaming Tensor Engine. Runs huge MoE models from NVMe."};
  app.set_version_flag("--version", "waste 0.1.0");
  app.require_subcommand(1);
  waste::cli::register_container_commands(app);
  waste::cli::register_synth_command(app);
  waste::cli::register_convert_command(app);
  waste::cli::register_iobench_command(app);
  waste::cli::register_plan_command(app);
  waste::cli::register_tokenize_command(app);
  waste::cli::register_prompt_command(app);
  waste::cli::register_eval_command(app);
  waste::cli::register_vision_command(app);
  waste::cli::register_run_command(app);
  waste::cli::register_bench_command(app);
  waste::cli::register_up_commands(app);
  waste::cli::register_chat_command(app);
  waste::cli::register_timeline_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const waste::Error& e) {
    std::fprintf(stderr, "waste: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waste: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
