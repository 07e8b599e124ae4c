// `waste run MODEL "prompt" -n N [--temp T] [--seed S] [--chat] [--connect W | --private]`:
// streams the generated text, then one line of figures (tokens, seconds, tok/s, expert
// hits/misses, GB read) on stderr. Where it runs (tools/waste/running_instance.h):
//  - `--connect W`: through the instance at W over Engine RPC (it must serve MODEL);
//  - `--private`, `--run-dir`, `--no-iod`, `--budget`, `--slots`, `--working-sets`, and the
//    engine's own `--kda-chunk`, `--chunk`, `--lookahead`, `--timeline`, `--pinned-reads`: the
//    engine in this process (those options describe that private engine; refused with --connect);
//  - otherwise through the instance at the default run directory when it answers and serves
//    MODEL, else in this process (with a private waste-iod).
// The reply is read the same way either way: through an instance compute reads it; in this
// process InProcessReply does what compute does (a chat's reply parsed by shared/reply/, a plain
// completion without its special ids). A chat reply is shown as `waste chat` shows one
// (ReplyOutput, cmd_chat.cpp): reasoning apart, tool calls as JSON.
// `--image FILE` (repeatable, needs --chat: an image is part of a chat message) puts the images
// in the user message before the prompt's text (tools/waste/image_input.h); `--image-patches N`
// is their patch budget. Through an instance compute runs the tower; in this process the engine
// does (Engine::with_images), after the same checks.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/image/image_budget.h"
#include "shared/chat/render.h"
#include "shared/reply/reply_parser.h"
#include "shared/tokenizer/tokenizer.h"
#include "shared/util/error.h"
#include "shared/util/option_limits.h"
#include "tools/waste/commands.h"
#include "tools/waste/option_checks.h"
#include "tools/waste/engine_cli.h"
#include "tools/waste/image_input.h"
#include "tools/waste/quit_signals.h"
#include "tools/waste/running_instance.h"

namespace waste::cli {


namespace {

struct RunOptions {
  EngineCliOptions engine;
  std::string prompt, system;
  SamplingParams sampling;
  bool chat = false;
  bool no_thinking = false;  // --no-thinking (needs --chat)
  std::string connect;
  bool private_engine = false;
  bool context_given = false;  // --ctx on the command line: asked of a running instance too
  std::vector<std::string> in_process_flags;  // given options that describe an engine in this process
  std::vector<std::string> image_paths;  // --image (needs --chat)
  int image_patches = 0;                 // --image-patches; 0: the engine's default
};

// What the images of a run took, for the figures line.
struct ImageFigures {
  size_t images = 0;
  uint64_t tokens = 0;
  double seconds = 0;
};

// The line after the text, on stderr: the same figures whichever way the engine ran.
void print_figures(uint64_t tokens, double decode_s, double tok_per_s, uint64_t prompt_tokens, double prefill_s,
                   uint64_t hits, uint64_t misses, uint64_t bytes, const std::string& path, const std::string& stop,
                   const ImageFigures& img = {}) {
  std::printf("\n");
  std::fflush(stdout);  // the text line ends before the figures (on stderr) start
  char images[128] = "";
  if (img.images > 0)
    std::snprintf(images, sizeof images, ", %llu of them for %zu image%s (vision tower %.2f s)",
                  (unsigned long long)img.tokens, img.images, img.images == 1 ? "" : "s", img.seconds);
  std::fprintf(stderr,
               "%llu tokens, %.2f s, %.2f tok/s (prompt %llu tokens%s in %.2f s), experts: %llu hits / %llu misses, "
               "%.3f GB read [%s; stop: %s]\n",
               (unsigned long long)tokens, decode_s, tok_per_s, (unsigned long long)prompt_tokens, images, prefill_s,
               (unsigned long long)hits, (unsigned long long)misses, double(bytes) / 1e9, path.c_str(), stop.c_str());
}

void stream_text(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// The chat request of --chat: [system,] user (its images before its text), and thinking only
// when --no-thinking turned it off (the kimi format has no thinking channel and refuses an
// explicit "on").
chat::ChatRequest chat_request(const RunOptions& o, const std::vector<ImageFile>& images) {
  std::vector<std::pair<std::string, std::string>> msgs;
  if (!o.system.empty()) msgs.emplace_back("system", o.system);
  msgs.emplace_back("user", o.prompt);
  chat::ChatRequest r = chat::simple_chat(msgs);
  if (!images.empty()) r.messages.back() = user_message_with_images(images, o.prompt);
  if (o.no_thinking) {
    r.thinking = false;
    r.thinking_given = true;
  }
  return r;
}

// Through a running instance: the same prompt (compute adds bos to a plain prompt opening a
// session, as the in-process path does) and the same output.
void run_connected(const RunOptions& o, RunningInstance& inst, const std::vector<ImageFile>& images) {
  // Said here rather than by compute, whose refusal would name a message part, not the file.
  require(images.empty() || inst.info.vision,
          "run: --image " + (images.empty() ? std::string() : images[0].path) + ": the model of the instance at " +
              inst.where + " has no vision tower");
  client::Request r;
  if (o.chat) {
    r.kind = client::Request::Kind::Chat;
    r.chat = chat_request(o, images);
    r.image_patches = uint32_t(o.image_patches);
  } else {
    r.kind = client::Request::Kind::Text;
    r.text = o.prompt;
  }
  r.max_tokens = uint32_t(o.sampling.max_tokens);
  r.temperature = o.sampling.temperature;
  r.top_k = uint32_t(o.sampling.top_k);
  r.top_p = o.sampling.top_p;
  r.min_p = o.sampling.min_p;
  r.repetition_penalty = o.sampling.repetition_penalty;
  r.seed = o.sampling.seed;
  r.stop = o.sampling.stop;
  auto s = inst.client->open_session(o.context_given ? uint32_t(o.engine.context) : 0);
  if (!o.chat) std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  client::Result st;
  if (o.chat) {
    const std::shared_ptr<ReplyOutput> out = open_reply_output();
    st = s->generate_events(r, [&](const client::TokenEvent& ev) {
      show_reply_delta(*out, ev.reasoning, ev.text, ev.tool_calls);
      return !quit::requested.load();  // a quit signal ends the reply (run_until_signal)
    });
    close_reply_output(*out);
  } else {
    st = s->generate(r, [](int32_t, std::string_view text) {
      stream_text(text);
      return !quit::requested.load();
    });
  }
  print_figures(st.tokens, st.decode_seconds, st.tok_per_s, st.prompt_tokens, st.prefill_seconds, st.experts.hits,
                st.experts.misses, st.experts.bytes_read, "instance at " + inst.where + ": " + inst.info.expert_path, st.stop_reason,
                {images.size(), st.image_tokens, st.image_seconds});
}

// A reply generated in this process, read as compute reads one
// (compute/server/engine_service.cpp) so that both ways print the same. Engine::generate's text
// includes special token names, so the ids are read here instead: a chat's by the reply parser
// (shown by ReplyOutput), a plain completion's decoded without its special ids; stop strings
// are matched in that content only, never in markup.
class InProcessReply {
 public:
  // chat: nullptr for a plain completion.
  InProcessReply(const tok::Tokenizer& t, const chat::ChatRequest* chat, std::vector<std::string> stops)
      : tok_(t), stops_(std::move(stops)) {
    if (chat) {
      parser_.emplace(t, parser_options(t, *chat));
      out_ = open_reply_output();
    } else {
      text_.emplace(t);
    }
  }

  // One generated id (never a stop id: Engine::generate ends before those). False: a stop
  // string matched, generation must end.
  bool token(int32_t id) {
    if (parser_) {
      const reply::ReplyDelta d = parser_->push(uint32_t(id));
      show_reply_delta(*out_, d.reasoning, stops_.push(d.content), d.tool_calls);
    } else {
      const bool text = uint32_t(id) < tok_.vocab_size() && !tok_.is_special(uint32_t(id));
      stream_text(stops_.push(text ? text_->push(uint32_t(id)) : std::string()));
    }
    return !stops_.stopped();
  }

  // After generation: what is still held (unless a stop string ended the reply, as in compute),
  // then a chat reply's end (its tool calls).
  void finish() {
    if (!stops_.stopped()) {
      if (parser_) {
        const reply::ReplyDelta d = parser_->finish();
        show_reply_delta(*out_, d.reasoning, stops_.push(d.content) + stops_.flush(), d.tool_calls);
      } else {
        stream_text(stops_.push(text_->flush()) + stops_.flush());
      }
    }
    if (out_) close_reply_output(*out_);
  }
  bool stopped() const { return stops_.stopped(); }

 private:
  // K3's reply starts inside think when the prompt opened it (thinking on, a generation prompt).
  static reply::ParserOptions parser_options(const tok::Tokenizer& t, const chat::ChatRequest& r) {
    reply::ParserOptions po;
    po.format = t.config().chat_format;
    po.thinking = po.format == tok::ChatFormat::K3 && r.thinking && r.add_generation_prompt;
    return po;
  }

  const tok::Tokenizer& tok_;
  StopMatcher stops_;
  std::optional<reply::ReplyParser> parser_;
  std::optional<tok::DecodeStream> text_;
  std::shared_ptr<ReplyOutput> out_;
};

GenerateStats generate_in_process(Engine& e, Session& s, const std::vector<int32_t>& prompt, const RunOptions& o,
                                  const chat::ChatRequest* chat, std::span<const ImageRun> images) {
  InProcessReply reply(e.tokenizer(), chat, o.sampling.stop);
  SamplingParams sp = o.sampling;
  sp.stop.clear();  // matched by InProcessReply in the content
  // id -1 is Engine::generate's held-back raw text: InProcessReply holds its own (finish()).
  // A quit signal ends generation at the next token (run_until_signal ends the process after).
  GenerateStats st = e.generate(
      s, prompt, sp,
      [&](int32_t id, std::string_view) { return !quit::requested.load() && (id < 0 || reply.token(id)); }, images);
  if (reply.stopped()) st.stop_reason = "stop_string";  // Engine::generate saw the callback stop it
  reply.finish();
  return st;
}

// A chat's images in this process, as compute does it (rpc_server.cpp): each image part
// renders as its media markup (which names the file's size), then the tower runs and each
// placeholder expands into the image's positions. `prompt` becomes the expanded ids.
MediaPrompt images_in_process(Engine& e, chat::ChatRequest& request, const std::vector<ImageFile>& images,
                              int max_patches, std::vector<int32_t>& prompt) {
  require(e.vision().available(), "run: --image " + images[0].path + ": " + e.container().dir() + " has no vision tower");
  // The markup names the decoded size only (read_image_file has it): no second decode for it.
  request.image_prompts.emplace();
  for (const ImageFile& f : images) {
    PreparedImage size_only;
    size_only.width = f.width;
    size_only.height = f.height;
    request.image_prompts->push_back(size_only.prompt_markup());
  }
  prompt = e.encode_chat(request);
  std::vector<std::vector<uint8_t>> files;
  for (const ImageFile& f : images) files.push_back(f.bytes);
  MediaPrompt m = e.with_images(prompt, files, "--image", max_patches);
  prompt = m.ids;
  return m;
}

void run_in_process(const RunOptions& o, const std::vector<ImageFile>& images) {
  EngineHandle h(o.engine);
  Engine& e = h.engine();
  std::vector<int32_t> prompt;
  std::optional<chat::ChatRequest> request;
  MediaPrompt media;
  ImageFigures img;
  if (o.chat) {
    request = chat_request(o, images);
    if (images.empty()) {
      prompt = e.encode_chat(*request);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      media = images_in_process(e, *request, images, o.image_patches, prompt);
      img = {images.size(), uint64_t(media.image_tokens()),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
    }
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
  const GenerateStats st = generate_in_process(e, s, prompt, o, request ? &*request : nullptr, media.images);
  if (quit::requested.load()) return;  // no figures for a run cut short: the engine stops now
  print_figures(st.tokens, st.decode_seconds, st.tok_per_s, st.prompt_tokens,
                st.prefill_seconds, st.experts.hits, st.experts.misses, st.experts.bytes_read, h.expert_path(),
                st.stop_reason, img);
}

// -n -1: as many tokens as the context holds (generation then ends with stop "context"); the
// instance bounds max_tokens to the same 2^24 (compute/server/request_decode.cpp).
constexpr int kUntilContextFull = int(limits::kMaxContextTokens);

void run_generate(const RunOptions& given) {
  RunOptions o = given;
  // One rule whichever way the engine runs.
  require(o.sampling.max_tokens >= -1 && o.sampling.max_tokens <= kUntilContextFull,
          "run: -n/--max-tokens " + std::to_string(o.sampling.max_tokens) +
              ": must be -1 (until the context is full) or 0 to " + std::to_string(kUntilContextFull));
  if (o.sampling.max_tokens == -1) o.sampling.max_tokens = kUntilContextFull;
  require(o.sampling.top_k >= 0, "run: --top-k " + std::to_string(o.sampling.top_k) + ": must be >= 0 (0: off)");
  require(!o.no_thinking || o.chat, "run: --no-thinking needs --chat");
  require(!(!o.chat && !o.system.empty()), "run: --system needs --chat");
  // An image is a part of a chat message; a plain completion has nowhere to put it.
  require(o.image_paths.empty() || o.chat, "run: --image needs --chat (the images go in the user message)");
  require(o.image_patches == 0 || !o.image_paths.empty(), "run: --image-patches needs --image");
  // Read and checked before any engine starts: a missing file or a bad image fails at once.
  std::vector<ImageFile> images;
  for (const std::string& p : o.image_paths) images.push_back(read_image_file(p));
  // A running instance has its own engine: options that shape one in this process cannot apply
  // to it, so any of them means this process (and, with --connect, an error naming them).
  const bool private_only = !o.in_process_flags.empty();
  if (private_only && !o.connect.empty()) {
    std::string names;
    for (const std::string& n : o.in_process_flags) names += (names.empty() ? "" : ", ") + n;
    throw Error("run: --connect talks to a running instance; " + names +
                " describe an engine in this process (a running instance keeps its own): use one or the other");
  }
  if (!private_only) {
    if (auto inst = find_running_instance(o.connect, o.engine.model)) return run_connected(o, *inst, images);
  }
  run_in_process(o, images);
}

}  // namespace

void register_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, streamed as it is produced");
  cmd->footer(
      "Where it runs: with --connect W, through the instance at W (a run directory, socket or host:port; it must\n"
      "serve MODEL). Otherwise through the instance at the default run directory ($WASTE_RUN_DIR, else\n"
      "$XDG_RUNTIME_DIR/waste, else /tmp/waste-UID) when one answers there and serves MODEL; else (or with\n"
      "--private, --run-dir, --no-iod, --budget, --slots, --working-sets, --kda-chunk, --chunk, --lookahead,\n"
      "--timeline, --pinned-reads: each is refused with --connect) the engine runs in this process, with a\n"
      "private waste-iod unless --run-dir has one or --no-iod. The text goes to stdout, the figures to stderr.\n"
      "--image FILE (with --chat, repeatable) puts a PNG or JPEG in the user message before the text; the model needs a\n"
      "vision tower; the figures then say how many prompt tokens the images took.\n"
      "With --chat the reply is parsed in the model's chat format, the same way either way: " +
      std::string(reply_output_help()));
  add_engine_options(cmd, o->engine);
  cmd->add_option("--connect", o->connect, "Run through the running instance at this run directory / socket / host:port");
  cmd->add_flag("--private", o->private_engine, "Never use a running instance: run the engine in this process");
  cmd->add_option("prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--max-tokens", o->sampling.max_tokens,
                  "Tokens to generate at most (256; -1: until the context is full; at most 16777216)");
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)");
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass (1: off)");
  cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below min_p x the top probability (0: off)");
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty, "Repetition penalty (1: off)");
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed, 0 to 2^64-1 (same seed, same text)")
      ->check(uint64_value());
  cmd->add_option("--stop", o->sampling.stop, "Stop before this string (repeatable)");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template (user turn + assistant prompt)");
  cmd->add_option("--system", o->system, "System message with --chat");
  cmd->add_flag("--no-thinking", o->no_thinking, "With --chat: answer without thinking (K3: the prompt opens the response channel)");
  cmd->add_option("--image", o->image_paths,
                  "With --chat: a PNG or JPEG file for the user message, before its text (repeatable; the model needs "
                  "a vision tower)");
  cmd->add_option("--image-patches", o->image_patches,
                  "Patch budget per image (default 1024, the instance's own through one: at most 256 image tokens; "
                  "each costs a text token's prefill)")
      ->check(CLI::Range(waste::kMinImagePatches, waste::kMaxImagePatches));
  cmd->callback([o, cmd] {
    o->context_given = cmd->count("--ctx") > 0;
    for (const char* name : {"--private", "--run-dir", "--no-iod", "--budget", "--slots", "--working-sets", "--kda-chunk",
                             "--chunk", "--lookahead", "--timeline", "--pinned-reads"})
      if (cmd->count(name) > 0) o->in_process_flags.push_back(name);
    // SIGINT/SIGTERM/SIGHUP end generation, then the private iod and run directory go, then
    // this process by the signal.
    quit::run_until_signal([&] { run_generate(*o); });
  });
}

}  // namespace waste::cli
