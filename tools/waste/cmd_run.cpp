// `waste run MODEL "prompt" -n N [--temp T] [--seed S] [--budget B] [--chat]`: streams the
// generated text, then one line of figures (tokens, seconds, tok/s, expert hits/misses, GB read).
#include <cstdio>
#include <string>

#include "shared/util/error.h"
#include "tools/waste/commands.h"
#include "tools/waste/engine_cli.h"

namespace waste::cli {

namespace {

struct RunOptions {
  EngineCliOptions engine;
  std::string prompt, system;
  SamplingParams sampling;
  bool chat = false, show_prompt_ids = false;
};

void run_generate(RunOptions o) {
  EngineHandle h(o.engine);
  Engine& e = h.engine();
  std::vector<int32_t> prompt;
  if (o.chat) {
    std::vector<tok::ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system, ""});
    msgs.push_back({"user", o.prompt, ""});
    prompt = e.encode_chat(msgs);
  } else {
    prompt = e.encode(o.prompt);
    // A plain prompt starts with bos when the tokenizer asks for one.
    const auto& tc = e.tokenizer().config();
    if (tc.add_bos && tc.bos_id) prompt.insert(prompt.begin(), int32_t(*tc.bos_id));
  }
  require(!prompt.empty(), "run: the prompt encodes to no tokens");
  Session s = e.new_session();
  if (!o.chat) std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  const GenerateStats st = e.generate(s, prompt, o.sampling, [](int32_t, std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  std::fflush(stdout);  // the text line ends before the figures (on stderr) start
  std::fprintf(stderr,
               "%lld tokens, %.2f s, %.2f tok/s (prompt %lld tokens in %.2f s), experts: %llu hits / %llu misses, "
               "%.3f GB read [%s; stop: %s]\n",
               (long long)st.tokens, st.decode_seconds, st.decode_tok_per_s(), (long long)st.prompt_tokens,
               st.prefill_seconds, (unsigned long long)st.experts.hits, (unsigned long long)st.experts.misses,
               double(st.experts.bytes_read) / 1e9, h.expert_path().c_str(), st.stop_reason.c_str());
}

}  // namespace

void register_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, streamed as it is produced");
  add_engine_options(cmd, o->engine);
  cmd->add_option("prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--max-tokens", o->sampling.max_tokens, "Tokens to generate at most (256)");
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)");
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass (1: off)");
  cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below min_p x the top probability (0: off)");
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty, "Repetition penalty (1: off)");
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed (same seed, same text)");
  cmd->add_option("--stop", o->sampling.stop, "Stop before this string (repeatable)");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template (user turn + assistant prompt)");
  cmd->add_option("--system", o->system, "System message with --chat");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace waste::cli
