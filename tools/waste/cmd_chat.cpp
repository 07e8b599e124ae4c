// `waste chat [PROMPT] [--model M] [--connect W | --private]`: a conversation over Engine RPC.
// With PROMPT: one turn, streamed, then a line of figures. Without: an interactive multi-turn
// conversation in one session, with /reset, /stats, /save PATH, /load PATH, /quit.
// Where it talks to (tools/waste/running_instance.h): --connect W, else the instance at the
// default run directory when it answers and serves M (any model when no --model), else a
// private instance of M (tools/waste/private_instance.h) started for this command and stopped
// on every way out (end, error, Ctrl-C at the prompt, SIGTERM).
// Signals: Ctrl-C during a reply cancels that reply and keeps the conversation; Ctrl-C at the
// prompt, SIGTERM and SIGHUP leave (after stopping a private instance). The handler
// (tools/waste/quit_signals.h) only sets flags and writes to a self-pipe that the prompt's poll()
// watches, so no signal is lost between a check and a blocking read.
// Images: `/image FILE` attaches a PNG or JPEG to the next message (its size, and its image
// tokens when the container can be opened here, are printed; `/image` alone lists the pending
// ones and drops them); `--image FILE` attaches to the first message. --image-patches N is
// their patch budget. A model without a vision tower refuses /image at once.
// A reply is parsed by compute (shared/reply/) and shown by ReplyOutput below, which
// `waste run --chat` shares: content on stdout, reasoning apart from it, tool calls as JSON.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/image/image_budget.h"
#include "shared/reply/reply_parser.h"
#include "shared/util/error.h"
#include "shared/util/option_limits.h"
#include "shared/util/progress.h"
#include "tools/libwaste/engine_client.h"
#include "tools/waste/commands.h"
#include "tools/waste/option_checks.h"
#include "tools/waste/image_input.h"
#include "tools/waste/private_instance.h"
#include "tools/waste/quit_signals.h"
#include "tools/waste/running_instance.h"

namespace waste::cli {

// How a chat reply is shown, for `waste chat` and `waste run --chat` (cmd_run.cpp declares
// these; commands.h would be their natural home). Content streams to stdout. Reasoning is kept
// apart so that it can never be mistaken for the answer: on a terminal it is dimmed in place;
// when stdout is not a terminal it goes to stderr between "[reasoning]" and "[/reasoning]" lines,
// so that stdout holds the answer alone. Tool calls are gathered and printed after the reply as
// one JSON line on stdout (the caller ends the line).
struct ReplyOutput {
  bool tty = false;               // stdout is a terminal
  bool in_reasoning = false;      // dim on (tty) / the stderr fence open
  bool stdout_line_start = true;  // the last byte on stdout ended a line (or nothing was written)
  bool stderr_line_start = true;
  std::vector<reply::ToolCall> calls;
  ~ReplyOutput();
};

const char* reply_output_help() {
  return "A chat reply's reasoning (K3's think channel, Kimi's <think>) is shown apart from the answer: dimmed on a\n"
         "terminal; when stdout is not a terminal it goes to stderr between [reasoning] and [/reasoning] lines, so that\n"
         "stdout holds the answer alone. Tool calls are printed after the reply as one JSON line on stdout:\n"
         "{\"tool_calls\": [{\"id\": ..., \"type\": \"function\", \"function\": {\"name\": ..., \"arguments\": ...}}]}.\n"
         "--no-thinking asks a K3 model to answer without thinking (the prompt opens the response channel).";
}

namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kNormal = "\x1b[0m";

void write_to(FILE* f, std::string_view s, bool& line_start) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), f);
  line_start = s.back() == '\n';
}

void begin_reasoning(ReplyOutput& o) {
  if (o.in_reasoning) return;
  o.in_reasoning = true;
  if (o.tty) std::fputs(kDim, stdout);
  else write_to(stderr, "[reasoning]\n", o.stderr_line_start);
}

// content_follows: on a terminal the answer then starts on a line of its own.
void end_reasoning(ReplyOutput& o, bool content_follows) {
  if (!o.in_reasoning) return;
  o.in_reasoning = false;
  if (o.tty) {
    std::fputs(kNormal, stdout);
    if (content_follows && !o.stdout_line_start) write_to(stdout, "\n", o.stdout_line_start);
  } else {
    if (!o.stderr_line_start) write_to(stderr, "\n", o.stderr_line_start);
    write_to(stderr, "[/reasoning]\n", o.stderr_line_start);
  }
}

void add_tool_call_delta(ReplyOutput& o, const reply::ToolCallDelta& d) {
  // A call's first delta names it (index == calls so far); later ones extend its arguments.
  if (d.index == o.calls.size()) o.calls.push_back({d.id, d.name, ""});
  if (d.index < o.calls.size()) o.calls[d.index].arguments += d.arguments;
}

std::string tool_calls_line(const std::vector<reply::ToolCall>& calls) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const reply::ToolCall& c : calls)
    list.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  nlohmann::ordered_json j;
  j["tool_calls"] = std::move(list);
  // The parser's text is valid UTF-8; replace anyway, so a line is always printed.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

// A reply cut by an error (compute went away) still leaves the terminal's colours as they were.
ReplyOutput::~ReplyOutput() {
  if (in_reasoning && tty) std::fputs(kNormal, stdout), std::fflush(stdout);
}

std::shared_ptr<ReplyOutput> open_reply_output() {
  auto o = std::make_shared<ReplyOutput>();
  o->tty = ::isatty(1) == 1;
  return o;
}

void show_reply_delta(ReplyOutput& o, std::string_view reasoning, std::string_view content,
                      const std::vector<reply::ToolCallDelta>& calls) {
  if (!reasoning.empty()) {
    begin_reasoning(o);
    write_to(o.tty ? stdout : stderr, reasoning, o.tty ? o.stdout_line_start : o.stderr_line_start);
  }
  if (!content.empty()) {
    end_reasoning(o, true);
    write_to(stdout, content, o.stdout_line_start);
  }
  for (const reply::ToolCallDelta& d : calls) add_tool_call_delta(o, d);
  std::fflush(stdout);
}

void close_reply_output(ReplyOutput& o) {
  end_reasoning(o, false);
  if (!o.calls.empty()) {
    if (!o.stdout_line_start) write_to(stdout, "\n", o.stdout_line_start);
    write_to(stdout, tool_calls_line(o.calls), o.stdout_line_start);
  }
  std::fflush(stdout);
}

namespace {

// Lines from stdin, or nothing once a quit signal arrived or stdin ended.
class LineReader {
 public:
  bool next(std::string& line) {
    for (;;) {
      if (quit::requested.load()) return false;
      if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return true;
      }
      if (eof_) {
        if (buf_.empty()) return false;
        line.swap(buf_);  // a last line without a newline
        buf_.clear();
        return true;
      }
      pollfd p[2] = {{0, POLLIN, 0}, {quit::wake_fd(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        throw Error(std::string("chat: poll on stdin: ") + std::strerror(errno));
      }
      if (p[1].revents) {
        char drain[64];
        while (::read(quit::wake_fd(), drain, sizeof drain) > 0) {
        }
        continue;  // quit::requested is looked at on the next round
      }
      if (p[0].revents) {
        char chunk[4096];
        const ssize_t n = ::read(0, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) eof_ = true;
        else buf_.append(chunk, size_t(n));
        // One line is bounded like a reply is: 16 MiB of text without a newline is not a turn.
        require(buf_.size() <= (16u << 20), "chat: a line of over 16 MiB on stdin");
      }
    }
  }

 private:
  std::string buf_;
  bool eof_ = false;
};

struct ChatOptions {
  std::string connect, model, budget, prompt, system;
  int max_tokens = 512;  // -n: -1 (until the context is full) or 0..2^24; into sampling.max_tokens
  uint32_t context = 0;
  client::Request sampling;
  bool stats = false, private_engine = false;
  bool no_thinking = false;  // --no-thinking: K3 answers without its think channel
  std::vector<std::string> images;  // --image: attached to the first message
  int image_patches = 0;            // --image-patches; 0: the instance's default
};

// The images waiting for the next user message (/image), and what is needed to describe them.
struct PendingImages {
  std::vector<ImageFile> files;
  bool vision = false;               // the instance's model has a tower
  uint32_t default_patches = 0;      // the instance's budget when --image-patches is not given
  std::string model;                 // the container compute serves (opened here to count tokens)
  std::unique_ptr<LocalVision> local;
  bool local_tried = false;
};

// Reads and checks one image for the next message, and says what it will take.
void attach_image(PendingImages& p, const std::string& path, int image_patches) {
  require(p.vision, "chat: /image " + path + ": the model " + p.model + " has no vision tower");
  ImageFile f = read_image_file(path);
  if (!p.local_tried) p.local = LocalVision::open(p.model), p.local_tried = true;
  const int budget = image_patches > 0 ? image_patches : int(p.default_patches);
  std::string tokens = "its image tokens are counted after the reply";
  if (p.local) tokens = std::to_string(p.local->tokens(f, budget)) + " image tokens";
  std::printf("(image %s: %dx%d, %s; attached to the next message)\n", path.c_str(), f.width, f.height, tokens.c_str());
  p.files.push_back(std::move(f));
}

// `/image` alone: the pending images are listed and dropped.
void clear_images(PendingImages& p) {
  if (p.files.empty()) return (void)std::puts("(no pending images; /image FILE attaches one to the next message)");
  std::string names;
  for (const ImageFile& f : p.files) names += " " + f.path;
  std::printf("(dropped %zu pending image%s:%s)\n", p.files.size(), p.files.size() == 1 ? "" : "s", names.c_str());
  p.files.clear();
}

std::string figures(const client::Result& r) {
  char images[96] = "";
  if (r.image_tokens > 0)
    std::snprintf(images, sizeof images, " (%llu image tokens, vision %.2f s)", (unsigned long long)r.image_tokens,
                  r.image_seconds);
  char buf[320];
  std::snprintf(buf, sizeof buf, "[%llu+%llu tokens%s, prefill %.2f s, %.1f tok/s, experts %llu hits / %llu misses, %.3f GB, %s]",
                (unsigned long long)r.prompt_tokens, (unsigned long long)r.tokens, images, r.prefill_seconds, r.tok_per_s,
                (unsigned long long)r.experts.hits, (unsigned long long)r.experts.misses, double(r.experts.bytes_read) / 1e9,
                r.stop_reason.c_str());
  return buf;
}

// One user turn; `images` go in the user message before its text.
client::Result turn(client::Session& s, const ChatOptions& o, const std::string& user, bool first,
                    const std::vector<ImageFile>& images = {}) {
  client::Request r = o.sampling;
  std::vector<std::pair<std::string, std::string>> msgs;
  if (first && !o.system.empty()) msgs.emplace_back("system", o.system);
  msgs.emplace_back("user", user);
  r.set_chat(msgs);
  if (!images.empty()) {
    r.chat.messages.back() = user_message_with_images(images, user);
    r.image_patches = uint32_t(o.image_patches);
  }
  // Only when asked: the kimi format has no thinking channel and refuses an explicit "on".
  if (o.no_thinking) {
    r.chat.thinking = false;
    r.chat.thinking_given = true;
  }
  // A SIGINT that arrived at the prompt was a quit; a fresh reply starts uncancelled.
  quit::cancel.store(quit::requested.load());
  quit::generating.store(true);
  client::Result res;
  const std::shared_ptr<ReplyOutput> out = open_reply_output();
  try {
    res = s.generate_events(r, [&](const client::TokenEvent& ev) {
      show_reply_delta(*out, ev.reasoning, ev.text, ev.tool_calls);
      return true;
    }, &quit::cancel);
  } catch (...) {
    quit::generating.store(false);
    throw;
  }
  quit::generating.store(false);
  close_reply_output(*out);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return res;
}

// /save and /load name a file on the compute host; a relative path means this directory.
std::string absolute_path(const std::string& p) {
  std::error_code ec;
  const auto a = std::filesystem::absolute(p, ec);
  return ec ? p : a.string();
}

// The conversation on an open session. Returns the signal that ended it (0: /quit or stdin ended).
int converse(client::Client& c, client::Session& s, const ChatOptions& o) {
  PendingImages pending;
  const client::Info info = c.info();
  pending.vision = info.vision;
  pending.default_patches = info.image_patches;
  pending.model = info.model;
  for (const std::string& path : o.images) attach_image(pending, path, o.image_patches);
  if (!o.prompt.empty()) {
    const client::Result r = turn(s, o, o.prompt, true, pending.files);
    std::fprintf(stderr, "%s\n", figures(r).c_str());
    if (o.stats) std::fprintf(stderr, "%s\n", c.stats().dump(2).c_str());
    if (quit::requested.load()) return quit::signal_number.load();
    return r.stop_reason == "cancelled" ? SIGINT : 0;  // a one-shot reply cut by Ctrl-C exits as interrupted
  }
  const bool tty = ::isatty(0);
  bool first = true;
  LineReader in;
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    if (!in.next(line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    try {
      if (line == "/quit" || line == "/exit") break;
      if (line == "/reset") {
        s.reset();
        first = true;
        std::puts("(conversation reset)");
      } else if (line == "/stats") {
        std::printf("session %s\nengine  %s\n", s.stats().dump().c_str(), c.stats()["engine"].dump().c_str());
      } else if (line.rfind("/save ", 0) == 0) {
        const auto r = s.save(absolute_path(line.substr(6)));
        std::printf("(saved %llu tokens, %s, in %.2f s)\n", (unsigned long long)r.tokens,
                    format_bytes(double(r.bytes)).c_str(), r.seconds);
      } else if (line.rfind("/load ", 0) == 0) {
        const auto r = s.load(absolute_path(line.substr(6)));
        std::printf("(loaded %llu tokens, %s, in %.2f s)\n", (unsigned long long)r.tokens,
                    format_bytes(double(r.bytes)).c_str(), r.seconds);
        first = false;
      } else if (line == "/image") {
        clear_images(pending);
      } else if (line.rfind("/image ", 0) == 0) {
        std::string path = line.substr(7);
        while (!path.empty() && path.back() == ' ') path.pop_back();
        attach_image(pending, path, o.image_patches);
      } else if (line[0] == '/') {
        std::puts("commands: /reset /stats /save PATH /load PATH /image [FILE] /quit");
      } else {
        // The images belong to this message, whether or not it is answered.
        const std::vector<ImageFile> images = std::move(pending.files);
        pending.files.clear();
        const client::Result r = turn(s, o, line, first, images);
        first = false;
        if (r.stop_reason == "cancelled") std::fputs("(cancelled)\n", stderr);
        if (tty) std::fprintf(stderr, "%s\n", figures(r).c_str());
      }
      std::fflush(stdout);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      // A lost compute ends the conversation; anything else (a refused request) does not.
      if (std::string(e.what()).find("went away") != std::string::npos) throw;
    }
    if (quit::requested.load()) break;
  }
  if (tty) std::fputc('\n', stdout);  // the shell's prompt starts on a line of its own
  return quit::requested.load() ? quit::signal_number.load() : 0;
}

// Returns the signal that ended the chat (to be re-raised once everything is cleaned up), or 0.
int run_chat(const ChatOptions& o) {
  require(!(o.private_engine && !o.connect.empty()), "chat: --private and --connect exclude each other");
  require(!o.private_engine || !o.model.empty(), "chat: --private needs --model M");
  quit::install(quit::Syscalls::Interrupted);  // the prompt's poll() returns at once
  // Declared in this order so that the session closes before its connection, and the
  // connection before the private instance stops.
  std::unique_ptr<PrivateInstance> priv;
  std::unique_ptr<client::Client> c;
  std::optional<RunningInstance> inst;
  if (!o.private_engine) inst = find_running_instance(o.connect, o.model);
  if (inst) {
    c = std::move(inst->client);
    std::fprintf(stderr, "waste: connected to the instance at %s (%s)\n", inst->where.c_str(), inst->info.model.c_str());
  } else {
    if (o.model.empty())
      throw Error("no instance answers at " + client::default_run_dir() +
                  ": start one with `waste up MODEL`, or give --model M to start a private one for this chat");
    PrivateInstanceOptions po;
    po.model = absolute_path(o.model);  // what compute reports back as its model
    po.budget = o.budget;
    po.context = o.context;
    std::fprintf(stderr, "waste: starting a private instance of %s (waste-iod + waste-compute)...\n", o.model.c_str());
    try {
      priv = std::make_unique<PrivateInstance>(po, &quit::requested);
    } catch (const Error&) {
      if (quit::requested.load()) return quit::signal_number.load();  // interrupted while starting: already cleaned up
      throw;
    }
    std::fprintf(stderr, "waste: private instance in %s (iod pid %d, compute pid %d); stopped when this chat ends\n",
                 priv->run_dir().c_str(), int(priv->iod_pid()), int(priv->compute_pid()));
    c = std::make_unique<client::Client>(priv->run_dir());
  }
  if (quit::requested.load()) return quit::signal_number.load();
  auto s = c->open_session(o.context);
  return converse(*c, *s, o);
}

}  // namespace

void register_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a running instance (waste up), or a private one of --model M");
  cmd->footer(
      "Where it talks to: with --connect W, the instance at W (a run directory, socket or host:port; with --model\n"
      "it must serve M). Otherwise the instance at the default run directory ($WASTE_RUN_DIR, else\n"
      "$XDG_RUNTIME_DIR/waste, else /tmp/waste-UID) when one answers there and serves M (any model without\n"
      "--model). Else, given --model M (or with --private), a private instance: waste-iod and waste-compute in a\n"
      "temporary run directory, started for this chat and stopped when it ends (also on Ctrl-C at the prompt,\n"
      "SIGTERM or an error). Replies go to stdout, status and figures to stderr.\n"
      "Interactive commands: /reset /stats /save PATH /load PATH /quit, and /image FILE (a PNG or JPEG for the\n"
      "next message, before its text; its size and image tokens are printed; /image alone lists and drops the\n"
      "pending ones). Ctrl-C during a reply cancels the reply and keeps the conversation; Ctrl-C at the prompt leaves.\n" +
      std::string(reply_output_help()));
  cmd->add_option("prompt", o->prompt, "One message; without it, an interactive conversation");
  cmd->add_option("--model", o->model, "Container (.waste) to chat with: the running instance must serve it, else a private one runs it");
  cmd->add_option("--connect", o->connect, "Run directory, socket or host:port of the instance (default: the default run dir)");
  cmd->add_flag("--private", o->private_engine, "Always start a private instance of --model");
  cmd->add_option("--budget", o->budget, "Expert cache of a private instance (bytes: 4G, 900M; default: iod's plan)");
  cmd->add_option("--ctx", o->context, "Session context in tokens (default: the instance's; at most 16777216)")
      ->check(CLI::Range(int64_t(0), limits::kMaxContextTokens));
  cmd->add_option("--system", o->system, "System message");
  // An int, not the request's uint32_t: CLI11 would wrap "-1" there. -1 means what it means for
  // `waste run`: until the context is full (compute bounds max_tokens to 2^24 as well).
  cmd->add_option("-n,--max-tokens", o->max_tokens,
                  "Tokens per reply at most (512; -1: until the context is full; at most 16777216)")
      ->check(CLI::Range(-1, int(limits::kMaxContextTokens)));
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling (1: off)");
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed (0 to 2^64-1)")->check(uint64_value());
  cmd->add_flag("--stats", o->stats, "Print the engine's statistics after a one-shot reply");
  cmd->add_flag("--no-thinking", o->no_thinking, "Answer without thinking (K3: the prompt opens the response channel)");
  cmd->add_option("--image", o->images, "A PNG or JPEG for the first message, before its text (repeatable; as /image)");
  cmd->add_option("--image-patches", o->image_patches,
                  "Patch budget per image (default: the instance's, 1024: at most 256 image tokens)")
      ->check(CLI::Range(waste::kMinImagePatches, waste::kMaxImagePatches));
  cmd->callback([o] {
    o->sampling.max_tokens = uint32_t(o->max_tokens == -1 ? limits::kMaxContextTokens : o->max_tokens);
    const int sig = run_chat(*o);
    if (sig != 0) {
      // Everything is stopped and removed: now end the way the signal would have.
      quit::exit_by_signal(sig);
    }
  });
}

}  // namespace waste::cli
