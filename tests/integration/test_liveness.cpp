// Every wait on another process has a deadline (hardening issue, defect 7), with real
// processes: a stopped iod or compute fails the requests that need it within the deadline and
// /health says which part is down; running again, the instance serves as before; the
// supervisor kills and restarts a child that answers nothing; `waste down` stops a supervisor
// that is still starting, and so does a Ctrl-C of that `up`.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/support/child_process.h"
#include "tests/integration/http_client.h"
#include "tests/integration/scoped_env.h"
#include "tests/integration/gate_fifo.h"
#include "tests/integration/test_engine_instance.h"
#include "tests/integration/synth_model.h"
#include "tools/libwaste/engine_client.h"

using namespace waste::test;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Polls `done` (an observable state of the processes) until it holds or timeout_s passes.
bool eventually(const std::function<bool()>& done, double timeout_s) {
  const auto t0 = Clock::now();
  while (!done()) {
    if (since(t0) > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling interval, not a synchronisation
  }
  return true;
}

json parse(const std::string& s) { return json::parse(s, nullptr, false); }

const std::string kCompletion = R"({"model":"tiny","prompt":"Hello there","max_tokens":4,"temperature":0})";

std::string text_of(const Http& h) {
  const json j = parse(h.body);
  return j.is_discarded() ? "" : j["choices"][0]["text"].get<std::string>();
}

}  // namespace

TEST_CASE("liveness: with iod stopped a request answers from the cache or fails within the deadline, /health names it, and it recovers") {
  const std::string http = "127.0.0.1:" + std::to_string(free_port());
  Instance inst("--http " + http + " --ctx 256 --iod-timeout 1500 --compute-timeout 1500 --wedge-timeout 0");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const std::string base = "http://" + http;
  const Http warm = curl(base + "/v1/completions", tmp.path(), kCompletion);
  REQUIRE_MESSAGE(warm.status == 200, warm.body);
  const Http fine = curl(base + "/health", tmp.path());
  CHECK_MESSAGE(fine.status == 200, fine.body);
  CHECK(parse(fine.body)["iod"]["state"] == "ok");
  CHECK(parse(fine.body)["compute"]["state"] == "ok");
  {
    ScopedStop stop(inst.pid_of("iod"));
    // The warm request's experts are all READY in the cache: read unpinned, they need no call
    // to iod between the charges of iod's traffic (every 250 ms, and as a request ends), and a
    // stopped iod reuses no slot. So the same request either answers with the same text (no
    // charge fell within it but its last, which waits out the deadline) or fails as one needing
    // iod does (a charge, or compute's idle ping, found iod not answering first): within the
    // deadline either way.
    const Http cached = curl(base + "/v1/completions", tmp.path(), kCompletion);
    CHECK_MESSAGE((cached.status == 200 || cached.status == 503), cached.body);
    if (cached.status == 200) CHECK(text_of(cached) == text_of(warm));
    if (cached.status == 503) CHECK_MESSAGE(parse(cached.body)["error"]["code"] == "iod_unavailable", cached.body);
    MESSAGE("a cached request with iod stopped: " << cached.status << " after " << cached.seconds << " s (deadline 1.5 s)");
    CHECK(cached.seconds < 10);  // a bound on a hang
    // /health says iod is not there, and answers in bounded time itself.
    Http h;
    CHECK(eventually([&] {
      h = curl(base + "/health", tmp.path());
      return h.status == 503;
    }, 15));
    CHECK(h.seconds < 6);
    const json hj = parse(h.body);
    CHECK_MESSAGE((hj["iod"]["state"] == "down" || hj["iod"]["state"] == "not_answering"), h.body);
    CHECK_MESSAGE(hj["compute"]["state"] == "ok", h.body);
    CHECK_MESSAGE(hj["error"]["code"] == "iod_unavailable", h.body);
    CHECK_MESSAGE(h.body.find(inst.run_dir()) == std::string::npos, h.body);  // no server paths
    // `waste health` asks iod itself.
    const auto wh = run_command(waste_bin() + " health --json --timeout-ms 1000 --run-dir " + inst.run_dir());
    CHECK_MESSAGE(wh.status == 1, wh.output);
    const json wj = parse(wh.output);
    CHECK_MESSAGE(wj["iod"]["state"] == "not_answering", wh.output);
    CHECK_MESSAGE(wj["compute"]["state"] == "ok", wh.output);
    // Now the connection is dropped: the next request must attach afresh, and fails within the
    // deadline rather than waiting as long as iod stays stopped.
    const Http r = curl(base + "/v1/completions", tmp.path(), kCompletion);
    CHECK_MESSAGE(r.status == 503, r.body);
    CHECK_MESSAGE(parse(r.body)["error"]["code"] == "iod_unavailable", r.body);
    MESSAGE("a request with iod stopped and the connection dropped: " << r.status << " after " << r.seconds
                                                                    << " s (deadline 1.5 s)");
    CHECK(r.seconds < 10);  // a bound on a hang (before: as long as iod stayed stopped)
  }
  // Running again: compute's idle ping attaches afresh, /health turns 200, and the same
  // request gets the same greedy text.
  CHECK(eventually([&] { return curl(base + "/health", tmp.path()).status == 200; }, 30));
  const Http again = curl(base + "/v1/completions", tmp.path(), kCompletion);
  CHECK_MESSAGE(again.status == 200, again.body);
  CHECK(text_of(again) == text_of(warm));
  CHECK(run_command(waste_bin() + " health --run-dir " + inst.run_dir()).status == 0);
}

TEST_CASE("liveness: a stopped compute fails requests and /health within the deadline, mid-stream too") {
  // The step gate holds the stream after a few tokens, so compute is stopped inside it.
  StepGateFifo gate;
  const std::string http = "127.0.0.1:" + std::to_string(free_port());
  std::optional<Instance> gated;
  {
    const ScopedEnv hooks({gate.env()});
    gated.emplace("--http " + http + " --ctx 256 --compute-timeout 1500 --wedge-timeout 0");
  }
  Instance& inst = *gated;
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp, tmp2;
  const std::string base = "http://" + http;
  gate.open();
  REQUIRE(curl(base + "/v1/completions", tmp.path(), kCompletion).status == 200);
  gate.close();
  gate.step(4);  // the prompt and three tokens of the stream, then it waits

  // A stream that compute stops answering in the middle of.
  Http streamed;
  std::thread client([&] {
    streamed = curl(base + "/v1/completions", tmp2.path(),
                    R"({"model":"tiny","prompt":"Hello","max_tokens":64,"temperature":0,"stream":true})", "-N");
  });
  waste::client::Client probe(inst.run_dir());
  REQUIRE(eventually([&] { return probe.stats()["engine"]["running"].get<int>() == 1; }, 30));
  // Running is not yet streaming (a slow build takes seconds for the gated steps): the client
  // must have its first text before compute stops, or "it had begun" is a race. curl -N writes
  // what arrives to out.txt at once.
  const std::string streamed_so_far = tmp2 / "out.txt";
  REQUIRE(eventually([&] {
    std::ifstream f(streamed_so_far, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {}).find("\"text\":") != std::string::npos;
  }, 60));
  {
    ScopedStop stop(inst.pid_of("compute"));
    client.join();
    MESSAGE("a stream with compute stopped ended after " << streamed.seconds << " s");
    CHECK(streamed.seconds < 15);  // pings every 0.75 s, each answered within 1.5 s, or the stream ends
    CHECK_MESSAGE(streamed.body.find("\"error\"") != std::string::npos, streamed.body);
    CHECK_MESSAGE(streamed.body.find("compute is unavailable") != std::string::npos, streamed.body);
    CHECK_MESSAGE(streamed.body.find("\"text\":") != std::string::npos, streamed.body);  // it had begun

    const Http h = curl(base + "/health", tmp.path());
    CHECK_MESSAGE(h.status == 503, h.body);
    CHECK(h.seconds < 6);
    CHECK_MESSAGE(parse(h.body)["compute"]["state"] == "not_answering", h.body);
    CHECK_MESSAGE(parse(h.body)["error"]["code"] == "compute_unavailable", h.body);
    const Http r = curl(base + "/v1/completions", tmp.path(), kCompletion);
    CHECK_MESSAGE(r.status == 503, r.body);
    CHECK(r.seconds < 6);
    // `waste status` answers too (before: it hung for as long as compute stayed stopped).
    const auto t0 = Clock::now();
    const auto st = run_command(waste_bin() + " status --run-dir " + inst.run_dir());
    CHECK(since(t0) < 15);
    CHECK_MESSAGE(st.output.find("compute not_answering") != std::string::npos, st.output);
  }
  gate.open();
  CHECK(eventually([&] { return curl(base + "/health", tmp.path()).status == 200; }, 30));
  CHECK(curl(base + "/v1/completions", tmp.path(), kCompletion).status == 200);
}

TEST_CASE("liveness: the supervisor kills a wedged child and starts a new one") {
  Instance inst("--ctx 256 --iod-timeout 1500 --wedge-timeout 3");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const int before = inst.pid_of("iod");
  REQUIRE(before > 0);
  ::kill(before, SIGSTOP);
  // It stays stopped: only the supervisor's SIGKILL can end it.
  CHECK_MESSAGE(eventually([&] { return inst.pid_of("iod") > 0 && inst.pid_of("iod") != before; }, 60),
                inst.log("supervise"));
  CHECK(::kill(before, 0) != 0);  // killed and reaped
  CHECK_MESSAGE(inst.log("supervise").find("wedged") != std::string::npos, inst.log("supervise"));
  std::ifstream f(inst.run_dir() + "/supervise.json");
  const json st = json::parse(f, nullptr, false);
  REQUIRE(!st.is_discarded());
  for (const auto& c : st["children"])
    if (c["name"] == "iod") CHECK(c["wedged"] == 1);
  // Compute attaches to the new iod by itself, and generates.
  CHECK(eventually([&] { return run_command(waste_bin() + " health --run-dir " + inst.run_dir()).status == 0; }, 30));
  waste::client::Client c(inst.run_dir());
  auto s = c.open_session();
  waste::client::Request r;
  r.text = "Hello";
  r.max_tokens = 3;
  CHECK(s->generate(r, [](int32_t, std::string_view) { return true; }).tokens == 3);
}

TEST_CASE("liveness: `waste down` stops a supervisor that is still starting") {
  TempDir dir;
  const std::string model = dir / "tiny.waste", run = dir / "run";
  synth_model(model, "--preset tiny-kimi-linear");
  // An iod that never answers: the supervisor waits for its socket (up to ten minutes).
  const std::string slow = dir / "slow-iod";
  std::ofstream(slow) << "#!/bin/sh\nexec sleep 300\n";
  ::chmod(slow.c_str(), 0700);
  ChildProcess up({"python3", env_or("WASTE_SUPERVISE", "tools/waste-supervise"), "up", model, "--run-dir", run},
                  {{"WASTE_IOD", slow}});
  int iod = -1;
  REQUIRE(up.wait_for([&] {
    std::ifstream f(run + "/supervise.json");
    const json st = json::parse(f, nullptr, false);
    if (!st.is_discarded())
      for (const auto& c : st["children"])
        if (c["name"] == "iod" && c["pid"].is_number_integer()) iod = c["pid"].get<int>();
    return iod > 0;
  }, 30));
  const auto t0 = Clock::now();
  const auto down = run_command(Instance::supervise() + " down --run-dir " + run);
  CHECK_MESSAGE(down.status == 0, down.output);
  CHECK_MESSAGE(down.output.find("stopped") != std::string::npos, down.output);
  CHECK(since(t0) < 20);
  CHECK(up.wait_exit(30) == 1);
  CHECK_MESSAGE(up.err().find("stopped while starting") != std::string::npos, up.err());
  CHECK(eventually([&] { return ::kill(iod, 0) != 0; }, 10));  // its child is gone with it
}

namespace {

// A process that has ended (a zombie nobody reaped yet counts as ended).
bool ended(int pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || (paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

}  // namespace

// Run only by the test below (doctest's --no-skip): an instance, its processes' pids on stdout,
// then nothing until a signal ends the binary (tests/test_main.cpp's teardown).
TEST_CASE("liveness helper: an instance that waits to be interrupted" * doctest::skip()) {
  Instance inst;
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  std::ifstream f(inst.run_dir() + "/supervise.json");
  const json st = json::parse(f, nullptr, false);
  REQUIRE(!st.is_discarded());
  std::string line = "READY " + inst.run_dir() + " " + std::to_string(st["supervisor_pid"].get<int>());
  for (const char* name : {"iod", "compute"}) line += " " + std::to_string(inst.pid_of(name));
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  for (;;) ::pause();  // the signal's teardown exits the process
}

TEST_CASE("liveness: SIGTERM of a test binary mid-test stops its instance: no supervisor, child or directory left") {
  // What meson test does on a timeout (SIGTERM) or Ctrl-C: the binary's destructors never run.
  ChildProcess t({"/proc/self/exe", "--no-skip", "--test-case=liveness helper*"});
  REQUIRE(t.started());
  REQUIRE_MESSAGE(t.wait_for([&] { return t.out().find('\n', t.out().find("READY ")) != std::string::npos; }, 120),
                  (t.out() + t.err()));
  std::istringstream ready(t.out().substr(t.out().find("READY ") + 6));
  std::string run;
  int supervisor = -1, iod = -1, compute = -1;
  ready >> run >> supervisor >> iod >> compute;
  REQUIRE(supervisor > 0);
  REQUIRE(iod > 0);
  REQUIRE(compute > 0);
  CHECK_FALSE(ended(supervisor));
  t.signal(SIGTERM);
  CHECK(t.wait_exit(60) == 128 + SIGTERM);  // exits as the signal would have, after the teardown
  CHECK_MESSAGE(t.err().find("interrupted by signal") != std::string::npos, t.err());
  // `down` waited for the processes; reaping by init may lag a moment (bounded poll).
  for (int pid : {supervisor, iod, compute}) CHECK_MESSAGE(eventually([&] { return ended(pid); }, 10), "pid ", pid, " still running");
  std::error_code ec;
  CHECK_FALSE(std::filesystem::exists(std::filesystem::path(run).parent_path(), ec));  // the instance's temporary directory
}

TEST_CASE("liveness: Ctrl-C of `waste up` while it starts stops the instance: no supervisor or child left") {
  // Before: a traceback, and the daemon went on starting in the background.
  TempDir dir;
  const std::string model = dir / "tiny.waste", run = dir / "run";
  synth_model(model, "--preset tiny-kimi-linear");
  const std::string slow = dir / "slow-iod";  // never answers: `up` is still waiting when interrupted
  std::ofstream(slow) << "#!/bin/sh\nexec sleep 300\n";
  ::chmod(slow.c_str(), 0700);
  ChildProcess up({"python3", env_or("WASTE_SUPERVISE", "tools/waste-supervise"), "up", model, "--run-dir", run},
                  {{"WASTE_IOD", slow}});
  int supervisor = -1, iod = -1;
  REQUIRE(up.wait_for([&] {
    std::ifstream f(run + "/supervise.json");
    const json st = json::parse(f, nullptr, false);
    if (!st.is_discarded()) {
      supervisor = st.value("supervisor_pid", -1);
      for (const auto& c : st["children"])
        if (c["name"] == "iod" && c["pid"].is_number_integer()) iod = c["pid"].get<int>();
    }
    return supervisor > 0 && iod > 0;
  }, 30));
  up.signal(SIGINT);  // what a terminal's Ctrl-C sends it (the daemon has a session of its own)
  CHECK(up.wait_exit(60) == 130);
  CHECK_MESSAGE(up.err().find("interrupted") != std::string::npos, up.err());
  CHECK_MESSAGE(up.err().find("Traceback") == std::string::npos, up.err());
  for (int pid : {supervisor, iod}) CHECK_MESSAGE(eventually([&] { return ended(pid); }, 10), "pid ", pid, " still running");
  CHECK(run_command(Instance::supervise() + " status --run-dir " + run).status == 3);
  CHECK_FALSE(std::filesystem::exists(run + "/supervise.json"));
}
