// `waste run` and `waste chat` with real processes: through a running instance (--connect or the
// default run directory), the fallback to a private instance (same greedy text, nothing left
// behind), the refusal of an instance serving another model, and Ctrl-C / SIGTERM handling of
// an interactive chat driven through a pipe.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "shared/ipc/shm_segment.h"
#include "shared/platform/shm.h"
#include "tests/support/child_process.h"
#include "tests/integration/scoped_env.h"
#include "tests/integration/gate_fifo.h"
#include "tests/integration/test_engine_instance.h"
#include "tests/integration/synth_model.h"
#include "tests/skip.h"

using namespace waste;
using namespace waste::test;
namespace fs = std::filesystem;

namespace {

// Runs `waste ARGS` to its end with the given environment; stdout and stderr apart.
struct Ran {
  int status = -1;
  std::string out, err;
};
Ran run_waste(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
          double timeout_s = 300) {
  std::vector<std::string> argv = {waste_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess p(argv, env);
  p.close_stdin();
  Ran r;
  r.status = p.wait_exit(timeout_s);
  r.out = p.out();
  r.err = p.err();
  return r;
}

// The pids and run directory the chat reports for its private instance.
struct PrivateSeen {
  int iod = -1, compute = -1;
  std::string run_dir;
};
PrivateSeen private_seen(const std::string& err) {
  PrivateSeen s;
  std::smatch m;
  if (std::regex_search(err, m, std::regex("private instance in (\\S+) \\(iod pid (\\d+), compute pid (\\d+)\\)"))) {
    s.run_dir = m[1];
    s.iod = std::stoi(m[2]);
    s.compute = std::stoi(m[3]);
  }
  return s;
}

bool alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH); }

// Nothing of a private instance is left: its processes, its run directory (the only thing
// it made under `tmpdir`), its shared memory segment.
void check_nothing_left(const PrivateSeen& s, const std::string& tmpdir) {
  REQUIRE_MESSAGE(s.iod > 0, "no private instance was reported");
  CHECK_FALSE(alive(s.iod));
  CHECK_FALSE(alive(s.compute));
  CHECK_FALSE(fs::exists(s.run_dir));
  CHECK(fs::is_empty(tmpdir));
  for (const std::string& name : platform::shm_names_with_prefix(ipc::segment_prefix(ipc::instance_id_for(s.run_dir))))
    FAIL_CHECK("segment left: " << name);
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + needle.size())) ++n;
  return n;
}

// The JSON after "session " in /stats output, the last one printed.
nlohmann::json last_session_stats(const std::string& out) {
  const size_t at = out.rfind("session {");
  if (at == std::string::npos) return {};
  const size_t end = out.find('\n', at);
  return nlohmann::json::parse(out.substr(at + 8, end - at - 8), nullptr, false);
}

}  // namespace

TEST_CASE("waste chat: one-shot through the running instance; --model falls back to a private one with the same text") {
  Instance inst("--ctx 512");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp, nowhere;
  const std::string prompt = "Tell me a story";
  const std::vector<std::string> args = {"chat", prompt, "-n", "12", "--model", inst.model()};

  // The default run directory holds the instance: used without --connect.
  const Ran via_default = run_waste(args, {{"WASTE_RUN_DIR", inst.run_dir()}});
  REQUIRE_MESSAGE(via_default.status == 0, via_default.err);
  CHECK(via_default.err.find("connected to the instance at " + inst.run_dir()) != std::string::npos);
  CHECK(via_default.err.find("+12 tokens") != std::string::npos);
  const std::string text = via_default.out;
  CHECK(text.size() > 1);
  // --connect names it explicitly; same greedy reply.
  std::vector<std::string> connect = {"chat", prompt, "-n", "12", "--connect", inst.run_dir()};
  const Ran via_connect = run_waste(connect, {{"WASTE_RUN_DIR", nowhere.path()}});
  REQUIRE_MESSAGE(via_connect.status == 0, via_connect.err);
  CHECK(via_connect.out == text);

  // Nothing runs at the default run directory: a private instance, the same reply, nothing left.
  const Ran priv = run_waste(args, {{"WASTE_RUN_DIR", nowhere.path()}, {"TMPDIR", tmp.path()}});
  REQUIRE_MESSAGE(priv.status == 0, priv.err);
  CHECK(priv.out == text);
  check_nothing_left(private_seen(priv.err), tmp.path());

  // Without --model and no instance: an error that says what to do, no private instance.
  const Ran none = run_waste({"chat", prompt}, {{"WASTE_RUN_DIR", nowhere.path()}, {"TMPDIR", tmp.path()}});
  CHECK(none.status == 1);
  CHECK(none.err.find("--model") != std::string::npos);
  CHECK(fs::is_empty(tmp.path()));

  // An instance that serves another container (a copy elsewhere): --connect refuses, the
  // default run directory says so and falls back to a private instance of the copy.
  const std::string copy = tmp / "copy.waste";
  fs::copy(inst.model(), copy, fs::copy_options::recursive);
  connect.insert(connect.end(), {"--model", copy});
  const Ran refused = run_waste(connect, {{"WASTE_RUN_DIR", nowhere.path()}});
  CHECK(refused.status == 1);
  CHECK_MESSAGE(refused.err.find("not " + copy) != std::string::npos, refused.err);
  TempDir tmp2;
  const Ran other = run_waste({"chat", prompt, "-n", "12", "--model", copy}, {{"WASTE_RUN_DIR", inst.run_dir()}, {"TMPDIR", tmp2.path()}});
  REQUIRE_MESSAGE(other.status == 0, other.err);
  CHECK(other.err.find("using a private engine") != std::string::npos);
  CHECK(other.out == text);  // the same container bytes: the same greedy reply
  check_nothing_left(private_seen(other.err), tmp2.path());
}

TEST_CASE("waste run: through a running instance gives the same greedy text as the engine in-process") {
  Instance inst("--ctx 512");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir nowhere;
  const std::vector<std::pair<std::string, std::string>> no_instance = {{"WASTE_RUN_DIR", nowhere.path()}};
  for (const bool chat : {false, true}) {
    CAPTURE(chat);
    std::vector<std::string> base = {"run", inst.model(), "Once upon a time", "-n", "16", "--no-progress"};
    if (chat) base.push_back("--chat");
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = base;
      a.insert(a.end(), extra.begin(), extra.end());
      return a;
    };
    const Ran local = run_waste(with({"--private"}), no_instance);
    REQUIRE_MESSAGE(local.status == 0, local.err);
    CHECK(local.err.find("private iod") != std::string::npos);
    const Ran remote = run_waste(with({"--connect", inst.run_dir()}), no_instance);
    REQUIRE_MESSAGE(remote.status == 0, remote.err);
    CHECK(remote.err.find("instance at " + inst.run_dir()) != std::string::npos);
    CHECK(remote.out == local.out);
    // The same figures line (the private iod logs to stderr before it).
    CHECK(("\n" + local.err).find("\n16 tokens, ") != std::string::npos);
    CHECK(remote.err.find("16 tokens, ") == 0);
    if (!chat) CHECK(remote.out.rfind("Once upon a time", 0) == 0);
    // No --connect: the default run directory's instance serves this model, so it is used.
    const Ran found = run_waste(base, {{"WASTE_RUN_DIR", inst.run_dir()}});
    REQUIRE_MESSAGE(found.status == 0, found.err);
    CHECK(found.err.find("instance at " + inst.run_dir()) != std::string::npos);
    CHECK(found.out == local.out);
  }
  // An explicit --connect with options of an in-process engine is a contradiction.
  const Ran both = run_waste({"run", inst.model(), "x", "--connect", inst.run_dir(), "--no-iod"}, no_instance);
  CHECK(both.status == 1);
  CHECK(both.err.find("--connect") != std::string::npos);
}

TEST_CASE("waste up --shm: named keeps the cache in /dev/shm (and up notes 4 KiB pages there); auto takes iod's huge-page file where it can") {
  Instance named("--shm named");
  REQUIRE_MESSAGE(named.ok(), named.why());
  CHECK_MESSAGE(named.log("iod").find("(segment waste-iod-") != std::string::npos, named.log("iod"));
  if (!platform::shm_huge_pages_enabled(platform::shm_huge_page_mode()))
    CHECK_MESSAGE(named.up_output().find("iod's expert cache is on 4 KiB pages") != std::string::npos, named.up_output());
  named.stop();

  std::string why;
  const int probe = platform::create_private_huge_shm(4096, why);
  if (probe < 0 || platform::shm_huge_pages_enabled(platform::shm_huge_page_mode())) {
    if (probe >= 0) ::close(probe);
    waste::test::skip_part("auto uses /dev/shm here (" + (why.empty() ? std::string("it has huge pages") : why) + ")");
    return;
  }
  ::close(probe);
  Instance automatic;
  REQUIRE_MESSAGE(automatic.ok(), automatic.why());
  CHECK_MESSAGE(automatic.log("iod").find("(segment /proc/") != std::string::npos, automatic.log("iod"));
  CHECK_MESSAGE(automatic.up_output().find("4 KiB pages") == std::string::npos, automatic.up_output());
}

TEST_CASE("waste chat: Ctrl-C cancels a streaming reply, not the session; /stats, /save, /reset, /load; /quit exits 0") {
  // The tiny model writes ~700 tokens/s: a reply could end before the Ctrl-C lands (compute
  // runs ahead of the client by the stream's flow-control window). Compute's step gate lets
  // each reply take 4 steps, then holds it until the Ctrl-C cancels it.
  StepGateFifo gate;
  std::optional<Instance> gated;
  {
    const ScopedEnv hook({gate.env()});
    gated.emplace("--ctx 65536");
  }
  Instance& inst = *gated;
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  ChildProcess chat({waste_bin(), "chat", "--connect", inst.run_dir(), "-n", "60000"}, {}, tmp.path());
  REQUIRE(chat.started());
  nlohmann::json before;
  for (int round = 1; round <= 2; ++round) {
    CAPTURE(round);
    const size_t out_at = chat.out().size(), cancelled = count_of(chat.err(), "(cancelled)");
    // Four steps for this reply (its prompt and three tokens), then it is held until the
    // Ctrl-C; permits a round left unused are dropped first. With 32 steps, round 2's reply
    // (the same ids every run) reached an end-of-turn id within them and ended by itself
    // whenever the Ctrl-C took longer than those steps: the Ctrl-C then found the prompt and
    // quit the chat (4 of 40 runs, always round 2, the same short reply shown each time).
    gate.close();
    gate.step(4);
    REQUIRE(chat.write(round == 1 ? "Tell me a very long story\n" : "Go on\n"));
    // The reply has started streaming (first bytes), then Ctrl-C.
    REQUIRE_MESSAGE(chat.wait_for([&] { return chat.out().size() > out_at; }, 60), chat.err());
    chat.signal(SIGINT);
    REQUIRE_MESSAGE(chat.wait_for([&] { return count_of(chat.err(), "(cancelled)") > cancelled; }, 60),
                    chat.err() << "\nchat's output since the line was sent:\n" << chat.out().substr(out_at)
                               << "\ncompute's log:\n" << inst.log("compute"));
    // The same session answers the next line: its figures grew by this round's reply.
    const size_t stats_at = chat.out().size();
    REQUIRE(chat.write("/stats\n"));
    REQUIRE(chat.wait_for([&] { return chat.out().find("engine  {", stats_at) != std::string::npos &&
                                       chat.out().back() == '\n'; }, 60));
    const nlohmann::json s = last_session_stats(chat.out());
    REQUIRE_MESSAGE(s.is_object(), chat.out());
    CHECK(s["requests"] == round);
    CHECK(s["generating"] == false);
    CHECK(s["tokens"].get<uint64_t>() < 60000 * uint64_t(round));  // cut short
    if (round == 2) {
      CHECK(s["id"] == before["id"]);
      CHECK(s["tokens"].get<uint64_t>() > before["tokens"].get<uint64_t>());
      CHECK(s["position"].get<uint64_t>() > before["position"].get<uint64_t>());
    } else {
      CHECK(s["tokens"].get<uint64_t>() > 0);
    }
    before = s;
  }
  // /save with a relative path writes beside the chat (not in compute's directory); /reset
  // forgets; /load brings the conversation back.
  auto answered = [&](const std::string& what, size_t from) {
    return chat.wait_for([&] { return chat.out().find(what, from) != std::string::npos && chat.out().back() == '\n'; }, 60);
  };
  const std::string held = std::to_string(before["position"].get<uint64_t>());
  size_t at = chat.out().size();
  REQUIRE(chat.write("/save conversation.state\n"));
  REQUIRE_MESSAGE(answered("(saved " + held + " tokens, ", at), (chat.out() + chat.err()));
  CHECK(fs::exists(tmp / "conversation.state"));
  at = chat.out().size();
  REQUIRE(chat.write("/reset\n/stats\n"));
  REQUIRE(answered("engine  {", at));
  CHECK(last_session_stats(chat.out())["position"] == 0);
  at = chat.out().size();
  REQUIRE(chat.write("/load conversation.state\n"));
  REQUIRE_MESSAGE(answered("(loaded " + held + " tokens, ", at), (chat.out() + chat.err()));
  REQUIRE(chat.write("/quit\n"));
  CHECK(chat.wait_exit(60) == 0);
}

TEST_CASE("waste chat: a private instance is stopped and removed on SIGTERM mid-reply and on Ctrl-C at the prompt") {
  TempDir models;
  const std::string model = models / "tiny.waste";
  synth_model(model, "--preset tiny-kimi-linear");
  TempDir nowhere;
  for (const int sig : {SIGTERM, SIGINT}) {
    CAPTURE(sig);
    TempDir tmp;
    ChildProcess chat({waste_bin(), "chat", "--model", model, "-n", "3000"},
                      {{"WASTE_RUN_DIR", nowhere.path()}, {"TMPDIR", tmp.path()}});
    REQUIRE(chat.started());
    REQUIRE_MESSAGE(chat.wait_for([&] { return private_seen(chat.err()).compute > 0; }, 120), chat.err());
    const PrivateSeen seen = private_seen(chat.err());
    CHECK(alive(seen.iod));
    CHECK(alive(seen.compute));
    CHECK(fs::exists(seen.run_dir + "/compute.sock"));
    if (sig == SIGTERM) {
      // Mid-reply: the reply streams, then SIGTERM.
      REQUIRE(chat.write("Tell me a very long story\n"));
      REQUIRE_MESSAGE(chat.wait_for([&] { return !chat.out().empty(); }, 60), chat.err());
    } else {
      // At the prompt: a command answered, so the chat is waiting for the next line.
      REQUIRE(chat.write("/stats\n"));
      REQUIRE(chat.wait_for([&] { return chat.out().find("engine  {") != std::string::npos; }, 60));
    }
    chat.signal(sig);
    CHECK(chat.wait_exit(60) == 128 + sig);  // ends the way the signal would, after cleaning up
    check_nothing_left(seen, tmp.path());
  }
}
// The pids of the waste-iod processes whose --run-dir lies under `dir` (from /proc: a leaked
// one is reparented away from the command, so its output cannot name it any more).
std::vector<int> iods_under(const std::string& dir) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::string> args;
    for (size_t at = 0; at < cmdline.size();) {
      const size_t end = cmdline.find('\0', at);
      args.push_back(cmdline.substr(at, end - at));
      at = end == std::string::npos ? cmdline.size() : end + 1;
    }
    if (args.empty() || fs::path(args[0]).filename() != "waste-iod") continue;
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--run-dir" && args[i + 1].rfind(dir + "/", 0) == 0) pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST_CASE("waste run --private: SIGTERM, SIGHUP and SIGINT mid-generation stop its private iod and remove its run directory") {
  TempDir models;
  const std::string model = models / "tiny.waste";
  synth_model(model, "--preset tiny-kimi-linear");
  for (const int sig : {SIGTERM, SIGHUP, SIGINT}) {
    CAPTURE(sig);
    TempDir tmp;  // TMPDIR: the run directory is the only thing the command makes there
    ChildProcess run({waste_bin(), "run", model, "hello", "-n", "100000", "--ctx", "200000", "--private", "--no-progress"},
                     {{"TMPDIR", tmp.path()}});
    REQUIRE(run.started());
    // Generating: text beyond the echoed prompt has come out.
    REQUIRE_MESSAGE(run.wait_for([&] { return run.out().size() > 100; }, 120), run.err());
    const std::vector<int> iods = iods_under(tmp.path());
    REQUIRE_MESSAGE(iods.size() == 1, run.err());  // its private iod runs in a directory under TMPDIR
    CHECK(alive(iods[0]));
    CHECK_FALSE(fs::is_empty(tmp.path()));
    run.signal(sig);
    CHECK(run.wait_exit(60) == 128 + sig);  // ends the way the signal would, after cleaning up
    CHECK_FALSE(alive(iods[0]));
    CHECK(iods_under(tmp.path()).empty());
    CHECK_MESSAGE(fs::is_empty(tmp.path()), run.err());
    // No figures line: the run was cut short, not finished.
    CHECK(run.err().find(" tok/s ") == std::string::npos);
  }
}

TEST_CASE("waste bench: SIGTERM mid-decode stops its private iod and leaves no run directory or timeline part") {
  TempDir models;
  const std::string model = models / "tiny.waste";
  synth_model(model, "--preset tiny-kimi-linear");
  TempDir tmp, out;
  const std::string trace = out / "T.json";
  ChildProcess bench({waste_bin(), "bench", model, "-n", "150000", "--ctx", "200000", "--no-progress", "--timeline", trace},
                     {{"TMPDIR", tmp.path()}});
  REQUIRE(bench.started());
  // Compute's part appears once the engine is up, just before the decode loop (bench prints
  // nothing until it ends): polled with a deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(trace + ".compute.part") && std::chrono::steady_clock::now() < deadline) ::usleep(10000);
  REQUIRE_MESSAGE(fs::exists(trace + ".compute.part"), bench.err());
  const std::vector<int> iods = iods_under(tmp.path());
  REQUIRE(iods.size() == 1);
  bench.signal(SIGTERM);
  CHECK(bench.wait_exit(60) == 128 + SIGTERM);
  CHECK_FALSE(alive(iods[0]));
  CHECK_MESSAGE(fs::is_empty(tmp.path()), bench.err());
  for (const auto& e : fs::directory_iterator(out.path())) CHECK_MESSAGE(e.path().extension() != ".part", e.path());
}

// K3 replies start inside the think channel: `waste run --chat` in this process (InProcessReply
// reads the ids with the reply parser) prints the same answer and the same reasoning as through
// an instance (compute parses them), with thinking on and with --no-thinking.
TEST_CASE("waste run --chat on K3: in-process and through an instance print the same answer and reasoning") {
  Instance inst("--ctx 512", "512M", "tiny-k3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir nowhere;
  const std::vector<std::pair<std::string, std::string>> no_instance = {{"WASTE_RUN_DIR", nowhere.path()}};
  auto reasoning = [](const std::string& err) {
    const size_t a = err.find("[reasoning]\n"), b = err.find("[/reasoning]\n");
    return a == std::string::npos || b == std::string::npos ? std::string() : err.substr(a, b - a);
  };
  for (const bool thinking : {true, false}) {
    CAPTURE(thinking);
    std::vector<std::string> args = {"run", inst.model(), "Once upon a time", "--chat", "-n", "24", "--no-progress"};
    if (!thinking) args.push_back("--no-thinking");
    std::vector<std::string> local_args = args, remote_args = args;
    local_args.push_back("--private");
    remote_args.insert(remote_args.end(), {"--connect", inst.run_dir()});
    const Ran local = run_waste(local_args, no_instance);
    const Ran remote = run_waste(remote_args, no_instance);
    REQUIRE_MESSAGE(local.status == 0, local.err);
    REQUIRE_MESSAGE(remote.status == 0, remote.err);
    CHECK(remote.out == local.out);
    CHECK(reasoning(remote.err) == reasoning(local.err));
    CHECK(remote.err.find("24 tokens, ") != std::string::npos);
  }
}
