// `waste chat [PROMPT] [--connect DIR|SOCKET]`: talks to a running instance (`waste up`) through
// Engine RPC. With PROMPT: one turn, streamed, then a line of figures. Without: an interactive
// multi-turn conversation in one session, with /reset, /stats, /save PATH, /load PATH, /quit;
// Ctrl-C during a reply cancels that reply and keeps the conversation.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>

#include "shared/util/error.h"
#include "tools/libwaste/engine_client.h"
#include "tools/waste/commands.h"

namespace waste::cli {

namespace {

std::atomic<bool> g_interrupt{false};
std::atomic<bool> g_generating{false};

void on_sigint(int) {
  if (!g_generating.load()) {
    // At the prompt: Ctrl-C leaves, as in any shell tool.
    ::_exit(130);
  }
  g_interrupt.store(true);
}

struct ChatOptions {
  std::string connect, prompt, system, save_to;
  client::Request sampling;
  bool stats = false;
};

std::string figures(const client::Result& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "[%llu+%llu tokens, prefill %.2f s, %.1f tok/s, experts %llu hits / %llu misses, %.3f GB, %s]",
                (unsigned long long)r.prompt_tokens, (unsigned long long)r.tokens, r.prefill_seconds, r.tok_per_s,
                (unsigned long long)r.hits, (unsigned long long)r.misses, double(r.bytes_read) / 1e9,
                r.stop_reason.c_str());
  return buf;
}

client::Result turn(client::Session& s, const ChatOptions& o, const std::string& user, bool first) {
  client::Request r = o.sampling;
  r.kind = client::Request::Kind::Chat;
  r.chat.clear();
  if (first && !o.system.empty()) r.chat.emplace_back("system", o.system);
  r.chat.emplace_back("user", user);
  g_interrupt.store(false);
  g_generating.store(true);
  client::Result res;
  try {
    res = s.generate(r, [](int32_t, std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    }, &g_interrupt);
  } catch (...) {
    g_generating.store(false);
    throw;
  }
  g_generating.store(false);
  std::fputc('\n', stdout);
  return res;
}

void run_chat(const ChatOptions& o) {
  const std::string where = o.connect.empty() ? client::default_run_dir() : o.connect;
  std::unique_ptr<client::Client> c;
  try {
    c = std::make_unique<client::Client>(where);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "\nno instance answers at " + where +
                ": start one with `waste up MODEL`, or run a private engine with `waste run MODEL \"prompt\"`");
  }
  auto s = c->open_session();
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  ::sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: a read at the prompt returns

  if (!o.prompt.empty()) {
    const client::Result r = turn(*s, o, o.prompt, true);
    std::fprintf(stderr, "%s\n", figures(r).c_str());
    if (o.stats) std::fprintf(stderr, "%s\n", c->stats().dump(2).c_str());
    return;
  }
  const bool tty = ::isatty(0);
  bool first = true;
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    try {
      if (line == "/quit" || line == "/exit") break;
      if (line == "/reset") {
        s->reset();
        first = true;
        std::puts("(conversation reset)");
        continue;
      }
      if (line == "/stats") {
        std::printf("session %s\nengine  %s\n", s->stats().dump().c_str(), c->stats()["engine"].dump().c_str());
        continue;
      }
      if (line.rfind("/save ", 0) == 0) {
        std::printf("(saved %llu tokens)\n", (unsigned long long)s->save(line.substr(6)));
        continue;
      }
      if (line.rfind("/load ", 0) == 0) {
        std::printf("(loaded %llu tokens)\n", (unsigned long long)s->load(line.substr(6)));
        first = false;
        continue;
      }
      if (line[0] == '/') {
        std::puts("commands: /reset /stats /save PATH /load PATH /quit");
        continue;
      }
      const client::Result r = turn(*s, o, line, first);
      first = false;
      if (r.stop_reason == "cancelled") std::fputs("(cancelled)\n", stderr);
      if (tty) std::fprintf(stderr, "%s\n", figures(r).c_str());
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      // A lost compute ends the conversation; anything else (a refused request) does not.
      if (std::string(e.what()).find("went away") != std::string::npos) throw;
    }
  }
}

}  // namespace

void register_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  o->sampling.max_tokens = 512;
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a running instance (waste up) over Engine RPC");
  cmd->add_option("prompt", o->prompt, "One message; without it, an interactive conversation");
  cmd->add_option("--connect", o->connect, "Run directory or socket of the instance (default: the default run dir)");
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("-n,--max-tokens", o->sampling.max_tokens, "Tokens per reply at most (512)");
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling (1: off)");
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed");
  cmd->add_flag("--stats", o->stats, "Print the engine's statistics after a one-shot reply");
  cmd->callback([o] { run_chat(*o); });
}

}  // namespace waste::cli
