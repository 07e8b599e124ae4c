// Each command group registers its subcommands on the `waste` app. A command's callback
// throws waste::Error for bad input; main prints it and exits 1.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string_view>
#include <vector>

#include "shared/reply/reply_parser.h"

namespace waste::cli {

void register_container_commands(CLI::App& app);  // info, verify   (tools/waste/cmd_container.cpp)
void register_synth_command(CLI::App& app);       // synth          (tools/synth/)
void register_convert_command(CLI::App& app);     // convert        (tools/convert/)
void register_iobench_command(CLI::App& app);     // iobench        (tools/waste/cmd_iobench_sim.cpp)
void register_plan_command(CLI::App& app);        // plan           (tools/waste/cmd_plan.cpp)
void register_tokenize_command(CLI::App& app);    // tokenize       (tools/waste/cmd_tokenize.cpp)
void register_prompt_command(CLI::App& app);      // prompt         (tools/waste/cmd_prompt.cpp)
void register_eval_command(CLI::App& app);        // eval           (tools/waste/cmd_eval.cpp)
void register_vision_command(CLI::App& app);      // vision         (tools/waste/cmd_vision.cpp)
void register_run_command(CLI::App& app);         // run            (tools/waste/cmd_run.cpp)
void register_bench_command(CLI::App& app);       // bench          (tools/waste/cmd_bench.cpp)
void register_up_commands(CLI::App& app);         // up, down, status (tools/waste/cmd_up.cpp)
void register_chat_command(CLI::App& app);        // chat           (tools/waste/cmd_chat.cpp)
void register_timeline_command(CLI::App& app);    // timeline merge (tools/waste/cmd_timeline.cpp)

// How a chat reply is shown by `waste chat` and `waste run --chat` (cmd_chat.cpp): the answer
// on stdout, reasoning dimmed on a terminal (else on stderr between [reasoning] fences), tool
// calls as one JSON line after the reply.
struct ReplyOutput;
std::shared_ptr<ReplyOutput> open_reply_output();
void show_reply_delta(ReplyOutput& o, std::string_view reasoning, std::string_view content,
                      const std::vector<reply::ToolCallDelta>& calls);
void close_reply_output(ReplyOutput& o);
const char* reply_output_help();

}  // namespace waste::cli
