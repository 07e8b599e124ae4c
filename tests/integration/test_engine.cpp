// Engine RPC with real processes: waste-iod + waste-compute under the supervisor, clients
// through the C++ client library and libwaste's C example.
#include <doctest/doctest.h>
#include <signal.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "shared/container/reader.h"
#include "shared/util/error.h"
#include "tests/integration/f32_file.h"
#include "tests/integration/scoped_env.h"
#include "tests/integration/gate_fifo.h"
#include "tests/integration/test_engine_instance.h"
#include "tools/libwaste/engine_client.h"
#include "tools/libwaste/waste.h"

using namespace waste;
using namespace waste::test;

namespace {

struct Generated {
  std::vector<int32_t> ids;
  std::string text;
  client::Result result;
};

client::Request greedy(const std::string& prompt, uint32_t n) {
  client::Request r;
  r.text = prompt;
  r.max_tokens = n;
  return r;
}

Generated run_alone(const std::string& where, const client::Request& r) {
  client::Client c(where);
  auto s = c.open_session();
  Generated g;
  g.result = s->generate(r, [&](int32_t id, std::string_view t) {
    if (id >= 0) g.ids.push_back(id);
    g.text.append(t);
    return true;
  });
  return g;
}

}  // namespace

TEST_CASE("engine: two clients at once get exactly the tokens each gets alone; limits; save/load; libwaste") {
  // The compute's start gate (a test hook) holds every step until two requests run: then the
  // two requests below share their steps from the first one, whatever the threads' timing on a
  // loaded machine. The gate opens for good then, so the solo runs after it run alone.
  std::optional<Instance> gated;
  {
    const ScopedEnv hook({{"WASTE_COMPUTE_TEST_START_GATE", "2"}});
    gated.emplace("--max-sessions 3 --sessions 2");  // two states in memory: the two requests share steps
  }
  Instance& inst = *gated;
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const std::string where = inst.run_dir();

  client::Client info_client(where);
  const client::Info info = info_client.info();
  CHECK(info.family == "kimi_linear");
  CHECK(info.max_sessions == 3);
  CHECK(info.expert_path.find("iod at") == 0);

  const auto batch_counters = [&] {
    client::Client c(where);
    const auto e = c.stats()["engine"];
    return std::pair{e["batches"].get<uint64_t>(), e["batched_sessions"].get<uint64_t>()};
  };
  // A long request A and a short one B, together first (through the gate), then each alone.
  const client::Request ra = greedy("The quick brown fox", 100), rb = greedy("Once upon a time", 16);
  const auto [batches0, sessions0] = batch_counters();
  Generated both_a, both_b;
  std::string err_a, err_b;
  const auto run_into = [&](const client::Request& r, Generated& out, std::string& err) {
    try {
      out = run_alone(where, r);
    } catch (const std::exception& e) {
      err = e.what();
    }
  };
  std::thread ta([&] { run_into(ra, both_a, err_a); });
  std::thread tb([&] { run_into(rb, both_b, err_b); });
  ta.join();
  tb.join();
  REQUIRE_MESSAGE(err_a.empty(), err_a);
  REQUIRE_MESSAGE(err_b.empty(), err_b);
  const auto [batches1, sessions1] = batch_counters();

  const Generated alone_a = run_alone(where, ra), alone_b = run_alone(where, rb);
  REQUIRE(alone_a.ids.size() == 100);
  REQUIRE(alone_b.ids.size() == 16);
  CHECK(alone_a.ids != std::vector<int32_t>(alone_b.ids.begin(), alone_b.ids.end()));
  // Greedy is deterministic: the same request again gives the same ids.
  CHECK(run_alone(where, rb).ids == alone_b.ids);
  CHECK(both_a.ids == alone_a.ids);
  CHECK(both_b.ids == alone_b.ids);
  CHECK(both_a.result.stop_reason == "max_tokens");
  // Every step that ran both adds one to sessions - batches. The two prompts take one step
  // each (one prefill per step), so B's 16 tokens decode beside A's in at least 15 steps,
  // unless a client falls 64 tokens behind (then its request sits out until it catches up).
  const uint64_t steps_with_both = (sessions1 - sessions0) - (batches1 - batches0);
  MESSAGE("steps: ", batches1 - batches0, ", of them with both sessions: ", steps_with_both);
  CHECK(steps_with_both >= 10);
  CHECK(batches1 - batches0 < uint64_t(alone_a.ids.size() + alone_b.ids.size()));

  // Limits: a fourth session is refused with a message that names the limit.
  {
    client::Client c(where);
    auto s1 = c.open_session(), s2 = c.open_session(), s3 = c.open_session();
    try {
      c.open_session();
      FAIL("a fourth session was granted");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("too many sessions") != std::string::npos);
    }
    // More context than compute allows, and a prompt that does not fit.
    CHECK_THROWS_WITH_AS(c.open_session(1u << 30), doctest::Contains("more than this compute allows"), Error);
    client::Request bad = greedy("x", 4);
    bad.kind = client::Request::Kind::Tokens;
    bad.tokens = {int32_t(info.vocab) + 5};
    CHECK_THROWS_WITH_AS(s1->generate(bad, [](int32_t, std::string_view) { return true; }),
                         doctest::Contains("outside the vocabulary"), Error);
  }
  // Closed sessions are freed: the client above is gone, so three may open again.
  {
    client::Client c(where);
    auto s1 = c.open_session(), s2 = c.open_session(), s3 = c.open_session();
    CHECK(c.stats()["engine"]["sessions"].get<int>() == 3);
  }

  // A multi-turn session, saved and loaded into a fresh one: the continuation is the same.
  {
    client::Client c(where);
    auto s = c.open_session();
    s->generate(greedy("First turn", 8), [](int32_t, std::string_view) { return true; });
    const std::string path = inst.run_dir() + "/saved.session";
    const uint64_t saved = s->save(path).tokens;
    CHECK(saved == uint64_t(s->stats()["position"].get<int64_t>()));
    const Generated cont = [&] {
      Generated g;
      s->generate(greedy(" and then", 12), [&](int32_t id, std::string_view) {
        if (id >= 0) g.ids.push_back(id);
        return true;
      });
      return g;
    }();
    auto s2 = c.open_session();
    CHECK(s2->load(path).tokens == saved);
    Generated again;
    s2->generate(greedy(" and then", 12), [&](int32_t id, std::string_view) {
      if (id >= 0) again.ids.push_back(id);
      return true;
    });
    CHECK(again.ids == cont.ids);
    CHECK(again.ids.size() == 12);
    s->reset();
    CHECK(s->stats()["position"].get<int64_t>() == 0);
    CHECK_THROWS_AS(s2->load(inst.run_dir() + "/no-such-file"), Error);
  }

  // The libwaste C example: same greedy ids as the C++ client for the same plain prompt.
  {
    const std::string hello = env_or("WASTE_HELLO", "waste-hello");
    // Text on stdout, "id N" lines on stderr (kept apart: the text may contain anything).
    const std::string ids_file = inst.run_dir() + "/hello-ids.txt";
    // (Grouped: run_command appends 2>&1, which must not override the inner redirect.)
    auto r = run_command("{ " + hello + " " + where + " 'Once upon a time' 16 2>" + ids_file + "; }");
    REQUIRE_MESSAGE(r.status == 0, r.output);
    CHECK(r.output.find("tokens=16 stop=max_tokens") != std::string::npos);
    std::vector<int32_t> ids;
    std::ifstream f(ids_file);
    for (std::string line; std::getline(f, line);)
      if (line.rfind("id ", 0) == 0) ids.push_back(std::atoi(line.c_str() + 3));
    CHECK(ids == alone_b.ids);
  }
}

TEST_CASE("engine: more open sessions than states in memory: idle states are parked on disk and come back exact") {
  // --sessions 1: compute holds one session state in memory (what the memory plan counts).
  // The park directory is a fresh one of the test's, so what compute leaves there is visible.
  TempDir park;
  // What a compute killed by SIGKILL leaves (its pid is gone: a child reaped here) is removed
  // when this one first parks; a directory named by a live process (this test) is kept.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(dead > 0);
  ::waitpid(dead, nullptr, 0);
  const std::string orphan = park.path() + "/waste-compute-parked-" + std::to_string(dead) + "-test";
  const std::string kept = park.path() + "/waste-compute-parked-" + std::to_string(::getpid()) + "-test";
  std::filesystem::create_directory(orphan);
  std::filesystem::create_directory(kept);
  std::ofstream(orphan + "/session-1") << "left by a killed compute";
  // The step gate (a test hook) holds the steps where the test must see a request wait.
  StepGateFifo gate;
  std::optional<Instance> gated;
  {
    const ScopedEnv hook({gate.env()});
    gated.emplace("--max-sessions 4 --sessions 1 --park-dir " + park.path());
  }
  Instance& inst = *gated;
  gate.open();
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const std::string where = inst.run_dir();
  client::Client c(where);
  const auto engine = [&] { return c.stats()["engine"]; };
  const auto turn = [](client::Session& s, const std::string& text, uint32_t n) {
    std::vector<int32_t> ids;
    s.generate(greedy(text, n), [&](int32_t id, std::string_view) {
      if (id >= 0) ids.push_back(id);
      return true;
    });
    return ids;
  };
  // Polls compute's figures until `ready` holds (30 s at most): requests and closes reach
  // compute through other threads.
  const auto until = [&](const std::function<bool(const nlohmann::json&)>& ready) {
    for (int i = 0; i < 600; ++i) {
      if (ready(engine())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  // The parked files in compute's private directory under --park-dir.
  const auto parked_files = [&] {
    std::vector<std::filesystem::path> files;
    for (const auto& d : std::filesystem::directory_iterator(park.path()))
      for (const auto& f : std::filesystem::directory_iterator(d.path()))
        if (f.is_regular_file()) files.push_back(f.path());
    return files;
  };
  CHECK(engine()["max_live_sessions"].get<int>() == 1);

  // The reference: one conversation of two turns with nothing in between.
  auto ref = c.open_session();
  turn(*ref, "First turn", 8);
  const std::vector<int32_t> ref_second = turn(*ref, " and then", 12);
  ref.reset();

  // The same conversation with another session's turn between its two turns: that turn needs
  // the one state, so A's idle state goes to disk, and A's second turn reads it back.
  auto a = c.open_session(), b = c.open_session();
  const uint64_t parked0 = engine()["parked"].get<uint64_t>(), unparked0 = engine()["unparked"].get<uint64_t>();
  turn(*a, "First turn", 8);
  turn(*b, "Something else entirely", 6);
  CHECK(engine()["parked"].get<uint64_t>() == parked0 + 1);  // A's, for B
  CHECK(engine()["live_sessions"].get<int>() == 1);
  {
    // While parked, the state is a file in compute's private directory under --park-dir.
    const std::vector<std::filesystem::path> files = parked_files();
    REQUIRE(files.size() == 1);
    CHECK_FALSE(std::filesystem::exists(orphan));
    CHECK(std::filesystem::exists(kept));
    // A parked state that does not read back (damaged here) fails that request alone, naming
    // it, and leaves the session as it was: with the file mended, the turn goes on exactly.
    const std::filesystem::path copy = park.path() + "/copy";
    std::filesystem::copy_file(files[0], copy);
    {
      std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(-1, std::ios::end);
      const char last = char(f.get());
      f.seekp(-1, std::ios::end);
      f.put(char(~last));  // another byte, whatever it was
    }
    CHECK_THROWS_WITH_AS(turn(*a, " and then", 12), doctest::Contains("parked state"), Error);
    std::filesystem::copy_file(copy, files[0], std::filesystem::copy_options::overwrite_existing);
    std::filesystem::remove(copy);
  }
  CHECK(turn(*a, " and then", 12) == ref_second);
  CHECK(engine()["unparked"].get<uint64_t>() == unparked0 + 1);
  CHECK(engine()["parked"].get<uint64_t>() == parked0 + 2);  // B's, for A

  // A parked session saves (its state is read back for it) and a closed one leaves no file.
  const std::string path = inst.run_dir() + "/parked.session";
  CHECK(b->save(path).tokens == uint64_t(b->stats()["position"].get<int64_t>()));
  CHECK(parked_files().size() == 1);  // after the save, one of A and B is parked again
  b.reset();
  a.reset();
  CHECK(until([&](const auto& e) { return e["sessions"].template get<int>() == 0 && parked_files().empty(); }));

  // Two requests at once with one state: the second waits for the first to end (never a
  // step with both), and both get what they get alone.
  const client::Request r1 = greedy("The quick brown fox", 24), r2 = greedy("Once upon a time", 16);
  const Generated alone1 = run_alone(where, r1), alone2 = run_alone(where, r2);
  Generated both1, both2;
  std::string err1, err2;
  const uint64_t batches0 = engine()["batches"].get<uint64_t>(), in_batches0 = engine()["batched_sessions"].get<uint64_t>();
  // Held by the gate: the first request runs (it has the state), the second waits for it.
  const auto settled = [&](int queued) { return until([&](const auto& e) { return e["queued"].template get<int>() == queued; }); };
  gate.close();
  std::thread t1([&] {
    try { both1 = run_alone(where, r1); } catch (const std::exception& e) { err1 = e.what(); }
  });
  REQUIRE(settled(1));
  std::thread t2([&] {
    try { both2 = run_alone(where, r2); } catch (const std::exception& e) { err2 = e.what(); }
  });
  REQUIRE(settled(2));
  {
    // One step, taken after the worker saw the second request: it holds the first alone.
    const auto e0 = engine();
    const uint64_t steps = e0["batches"].get<uint64_t>(), in_steps = e0["batched_sessions"].get<uint64_t>();
    gate.step(1);
    REQUIRE(until([&](const auto& e) { return e["batches"].template get<uint64_t>() == steps + 1; }));
    const auto e = engine();
    CHECK(e["batched_sessions"].get<uint64_t>() == in_steps + 1);
    CHECK(e["queued"].get<int>() == 2);
    CHECK(e["running"].get<int>() == 1);
    CHECK(e["live_sessions"].get<int>() == 1);
  }
  gate.open();
  t1.join();
  t2.join();
  REQUIRE_MESSAGE(err1.empty(), err1);
  REQUIRE_MESSAGE(err2.empty(), err2);
  CHECK(both1.ids == alone1.ids);
  CHECK(both2.ids == alone2.ids);
  CHECK(engine()["batched_sessions"].get<uint64_t>() - in_batches0 == engine()["batches"].get<uint64_t>() - batches0);

  // Stopped, compute removes its directory of parked states (the live process's stays).
  inst.stop();
  std::filesystem::remove(kept);
  CHECK(std::filesystem::is_empty(park.path()));
}

TEST_CASE("engine: kill -9 of compute mid-generation fails the client, the supervisor restarts it, iod stays warm") {
  Instance inst("--sessions 2");  // two requests in one step when iod dies
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const std::string where = inst.run_dir();
  const client::Request probe = greedy("Warm the cache", 24);
  // Cold, then warm: the budget holds every expert, so the second run hits.
  run_alone(where, probe);
  const client::Result warm = run_alone(where, probe).result;
  const double warm_rate = double(warm.experts.hits) / double(std::max<uint64_t>(1, warm.experts.hits + warm.experts.misses));
  CHECK(warm.experts.hits > 0);

  const int compute_pid = inst.pid_of("compute");
  REQUIRE(compute_pid > 0);
  // A libwaste client of the compute about to die: its next call says compute is gone.
  waste_client* wc = waste_connect(where.c_str());
  REQUIRE_MESSAGE(wc != nullptr, waste_last_error());
  waste_session* ws = waste_open_session(wc, 0);
  REQUIRE_MESSAGE(ws != nullptr, waste_last_error());
  std::string error;
  {
    client::Client c(where);
    auto s = c.open_session();
    bool killed = false;
    try {
      s->generate(greedy("A long story", 3000), [&](int32_t, std::string_view) {
        if (!killed) {
          killed = true;
          ::kill(compute_pid, SIGKILL);
        }
        return true;
      });
    } catch (const Error& e) {
      error = e.what();
    }
    CHECK(killed);
  }
  CHECK_MESSAGE(!error.empty(), "the client got no error when compute died");
  {
    char buf[4096];
    size_t len = 0;
    CHECK_MESSAGE(waste_session_stats_json(ws, buf, sizeof buf, &len) == WASTE_ERROR_DISCONNECTED, waste_last_error());
    CHECK(std::string(waste_last_error_field()).empty());
    waste_close_session(ws);
    waste_disconnect(wc);
  }

  // Bounded polling until the restarted compute answers a request.
  bool back = false;
  client::Result after;
  for (int i = 0; i < 600 && !back; ++i) {
    try {
      after = run_alone(where, probe).result;
      back = true;
    } catch (const Error&) {
      ::usleep(100000);
    }
  }
  REQUIRE_MESSAGE(back, inst.why());
  CHECK(inst.pid_of("compute") != compute_pid);
  const double after_rate = double(after.experts.hits) / double(std::max<uint64_t>(1, after.experts.hits + after.experts.misses));
  MESSAGE("hit rate warm " << warm_rate << ", right after the compute restart " << after_rate);
  CHECK(after_rate >= warm_rate);

  // kill -9 of iod while two sessions decode in the same steps: both requests fail with the
  // error, compute stays up and reattaches to the restarted iod.
  const int iod_pid = inst.pid_of("iod");
  REQUIRE(iod_pid > 0);
  {
    std::mutex mu;
    std::condition_variable cv;
    int started = 0;
    std::string errors[2];
    auto run = [&](int k) {
      try {
        client::Client c(where);
        auto s = c.open_session();
        bool first = true;
        s->generate(greedy(k == 0 ? "A long story" : "Another long story", 3000), [&](int32_t, std::string_view) {
          if (first) {
            first = false;
            std::lock_guard lk(mu);
            ++started;
            cv.notify_all();
          }
          return true;
        });
      } catch (const Error& e) {
        errors[k] = e.what();
      }
    };
    std::thread t0(run, 0), t1(run, 1);
    {
      std::unique_lock lk(mu);
      CHECK(cv.wait_for(lk, std::chrono::seconds(120), [&] { return started == 2; }));
    }
    ::kill(iod_pid, SIGKILL);
    t0.join();
    t1.join();
    MESSAGE("after kill -9 of iod: [", errors[0], "] [", errors[1], "]");
    CHECK_FALSE(errors[0].empty());
    CHECK_FALSE(errors[1].empty());
    CHECK((errors[0].find("batched with 1 other session") != std::string::npos ||
           errors[1].find("batched with 1 other session") != std::string::npos));
  }
  back = false;
  for (int i = 0; i < 600 && !back; ++i) {
    try {
      run_alone(where, probe);
      back = true;
    } catch (const Error&) {
      ::usleep(100000);
    }
  }
  REQUIRE_MESSAGE(back, inst.why());
  client::Client c(where);
  CHECK(c.stats()["engine"]["reattaches"].get<int>() >= 1);
  CHECK(inst.pid_of("iod") != iod_pid);
}

namespace {
bool same_bits(const float* a, const std::vector<float>& b, size_t n) {
  return n == b.size() && std::memcmp(a, b.data(), n * sizeof(float)) == 0;
}
}  // namespace

TEST_CASE("engine: eval over the RPC (C++ client and libwaste) gives waste eval's logits bit for bit; the session is untouched") {
  Instance inst;
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const std::string where = inst.run_dir();
  TempDir tmp;
  client::Client c(where);
  const client::Info info = c.info();
  auto s = c.open_session();
  client::Request first;
  first.text = "First turn";
  first.max_tokens = 6;
  s->generate(first, [](int32_t, std::string_view) { return true; });
  const int64_t pos = s->stats()["position"].get<int64_t>();
  REQUIRE(pos > 0);
  const std::vector<int32_t> ids = s->tokenize("The quick brown fox jumps over the lazy dog, and then over the fence");
  REQUIRE(ids.size() >= 8);
  {
    std::ofstream f(tmp / "ids.json");
    f << nlohmann::json(ids).dump();
  }
  for (const char* mode : {"", " --step"})
    REQUIRE(run_command(waste_bin() + " eval " + inst.model() + " --tokens " + (tmp / "ids.json") + " --logits " +
                        (tmp / (*mode ? "step.f32" : "prefill.f32")) + mode + " --no-iod").status == 0);
  const std::vector<float> ref_prefill = read_f32(tmp / "prefill.f32"), ref_step = read_f32(tmp / "step.f32");

  uint32_t V = 0;
  const std::vector<float> pre = s->eval(ids, false, &V);
  CHECK(V == info.vocab);
  CHECK(pre.size() == ids.size() * V);
  CHECK(same_bits(pre.data(), ref_prefill, pre.size()));
  const std::vector<float> step = s->eval(ids, true);
  CHECK(same_bits(step.data(), ref_step, step.size()));
  CHECK(s->eval(ids) == pre);
  CHECK(s->stats()["position"].get<int64_t>() == pos);
  CHECK_THROWS_WITH_AS(s->eval({int32_t(info.vocab)}), doctest::Contains("outside the vocabulary"), Error);
  CHECK_THROWS_WITH_AS(s->eval({}), doctest::Contains("no tokens"), Error);
  {
    auto small = c.open_session(4);
    CHECK_THROWS_WITH_AS(small->eval(ids), doctest::Contains("context of 4"), Error);
  }

  waste_client* wc = waste_connect(where.c_str());
  REQUIRE_MESSAGE(wc != nullptr, waste_last_error());
  waste_session* ws = waste_open_session(wc, 0);
  REQUIRE_MESSAGE(ws != nullptr, waste_last_error());
  float* logits = nullptr;
  uint32_t vocab = 0;
  REQUIRE_MESSAGE(waste_eval(ws, ids.data(), ids.size(), 0, &logits, &vocab) == WASTE_OK, waste_last_error());
  CHECK(vocab == V);
  CHECK(same_bits(logits, ref_prefill, ids.size() * vocab));
  waste_logits_free(logits);
  logits = nullptr;
  REQUIRE(waste_eval(ws, ids.data(), ids.size(), 1, &logits, nullptr) == WASTE_OK);
  CHECK(same_bits(logits, ref_step, ids.size() * V));
  waste_logits_free(logits);
  logits = reinterpret_cast<float*>(&vocab);  // set to NULL on any error
  CHECK(waste_eval(ws, ids.data(), 0, 0, &logits, &vocab) == WASTE_ERROR_ARGUMENT);
  CHECK(std::string(waste_last_error_field()) == "n");
  CHECK(logits == nullptr);
  const int32_t bad = int32_t(V);
  CHECK(waste_eval(ws, &bad, 1, 0, &logits, &vocab) == WASTE_ERROR);
  CHECK(std::string(waste_last_error()).find("outside the vocabulary") != std::string::npos);
  CHECK(waste_eval(ws, ids.data(), ids.size(), 0, nullptr, &vocab) == WASTE_ERROR_ARGUMENT);
  waste_logits_free(nullptr);
  waste_close_session(ws);
  waste_disconnect(wc);
}

TEST_CASE("engine: eval of exactly 64 MiB of logits crosses the RPC; one more token is refused naming the limit") {
  Instance inst("--ctx 4097");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  client::Client c(inst.run_dir());
  const client::Info info = c.info();
  REQUIRE(info.vocab == 4096);  // tiny-kimi-linear: 16 KiB a row, 4096 rows = 64 MiB
  auto s = c.open_session();
  std::vector<int32_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919) % info.vocab);
  const std::vector<float> all = s->eval(ids);
  CHECK(all.size() == size_t(4096) * 4096);
  const std::vector<float> head = s->eval(std::vector<int32_t>(ids.begin(), ids.begin() + 10));
  CHECK(std::memcmp(head.data(), all.data(), head.size() * sizeof(float)) == 0);
  ids.push_back(1);
  CHECK_THROWS_WITH_AS(s->eval(ids), doctest::Contains("64 MiB"), Error);
}

namespace {

// Flips one payload byte of a record (its checksum then fails) in the bank file.
void flip_payload_byte(const std::string& bank, uint64_t offset) {
  std::fstream f(bank, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char b = 0;
  f.read(&b, 1);
  b = char(b ^ 0x5a);
  f.seekp(std::streamoff(offset));
  f.write(&b, 1);
}

}  // namespace

namespace {

// One record that cannot be had fails only the request routed to it; its batch partner and the
// iod connection are untouched. The fault: the record's payload damaged on disk (a checksum
// mismatch), or, with `eio`, the record intact on disk but every read of it failing with EIO
// (iod's WASTE_IOD_TEST_EIO hook, as from a failing disk).
void check_one_record_fault(bool eio) {
  // Before `up`: damage one record of the first MoE layer, then find (in-process runs of the
  // damaged model) a prompt whose request reads it and one whose request does not. With `eio`
  // the damage is undone again and iod is told to fail that record's reads instead.
  const ScopedEnv no_fault({{"WASTE_IOD_TEST_EIO", ""}});
  const uint32_t n = 3;
  std::string failing, passing, named;
  const auto damage = [&](const std::string& model) -> std::string {
    Container c = Container::open(model);
    const ExpertLayerInfo& l = c.expert_layers().front();
    const char* prompts[] = {"The quick brown fox", "Once upon a time", "A", "Hello", "Why is the sky blue?", "x",
                             "One two three four five six", "Tea", "Go", "Alpha beta", "Zebra", "The end"};
    for (uint32_t e = 0; e < std::min<uint32_t>(l.expert_count, 8); ++e) {
      const uint64_t at = uint64_t(e) * l.layout.stride + 64 + 100;  // past the 64-byte header
      flip_payload_byte(l.bank_path, at);
      failing.clear();
      passing.clear();
      named = "layer " + std::to_string(l.layer) + " expert " + std::to_string(e);
      for (const char* p : prompts) {
        auto r = run_command(waste_bin() + " run " + model + " '" + p + "' --private --no-iod -n " + std::to_string(n) +
                             " --no-progress");
        if (r.status != 0 && r.output.find(named) != std::string::npos && failing.empty()) failing = p;
        if (r.status == 0 && passing.empty()) passing = p;
      }
      if (!failing.empty() && !passing.empty()) {
        if (eio) {
          flip_payload_byte(l.bank_path, at);  // intact again: only the reads fail
          ::setenv("WASTE_IOD_TEST_EIO", (std::to_string(l.layer) + ":" + std::to_string(e)).c_str(), 1);
        }
        return "";
      }
      flip_payload_byte(l.bank_path, at);  // restored: try the next expert
    }
    return "no damaged record splits the prompts into one that reads it and one that does not";
  };
  std::optional<Instance> gated;
  {
    const ScopedEnv hook({{"WASTE_COMPUTE_TEST_START_GATE", "2"}});
    gated.emplace("--max-sessions 3 --sessions 2", "512M", "tiny-kimi-linear", damage);
  }
  Instance& inst = *gated;
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  MESSAGE("damaged ", named, ": '", failing, "' reads it, '", passing, "' does not");
  const std::string where = inst.run_dir();
  const uint32_t reattaches0 = [&] {
    client::Client c(where);
    return c.stats()["engine"]["reattaches"].get<uint32_t>();
  }();

  // Both at once through the gate: they share their first steps.
  Generated bad, good;
  std::string err_bad, err_good;
  std::thread t0([&] {
    try {
      bad = run_alone(where, greedy(failing, n));
    } catch (const std::exception& e) {
      err_bad = e.what();
    }
  });
  std::thread t1([&] {
    try {
      good = run_alone(where, greedy(passing, n));
    } catch (const std::exception& e) {
      err_good = e.what();
    }
  });
  t0.join();
  t1.join();
  CHECK_MESSAGE(err_bad.find(named) != std::string::npos, err_bad);
  CHECK_MESSAGE(err_bad.find(eio ? "read error (Input/output error)" : "checksum") != std::string::npos, err_bad);
  CHECK_MESSAGE(err_bad.find("batched with") == std::string::npos, err_bad);  // its own fault, not the step's
  REQUIRE_MESSAGE(err_good.empty(), err_good);
  CHECK(good.ids.size() == n);
  // The innocent request got exactly what it gets alone, and compute kept its iod connection.
  CHECK(run_alone(where, greedy(passing, n)).ids == good.ids);
  client::Client c(where);
  const auto stats = c.stats()["engine"];
  CHECK(stats["reattaches"].get<uint32_t>() == reattaches0);
  CHECK(stats["failed"].get<uint64_t>() >= 1);
}

}  // namespace

TEST_CASE("engine: a damaged expert record fails only the request routed to it; its batch partner and the iod connection are untouched") {
  check_one_record_fault(false);
}

TEST_CASE("engine: an expert record that reads back as EIO fails only the request routed to it, likewise") {
  check_one_record_fault(true);
}
