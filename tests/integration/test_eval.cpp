// `waste eval` end to end through the real binaries: every fixture converted with lossless
// experts and an F32 trunk matches its reference logits (prefill rows, and decode rows fed one
// token at a time), and placement never changes results: the same bits whatever the cache size,
// prefetch setting, or whether experts come through iod or are read in-process; prefill chunk
// sizes change only rounding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>
#include <nlohmann/json.hpp>
#include <random>
#include <signal.h>
#include <thread>
#include <vector>

#include "shared/ipc/expert_store_client.h"
#include "shared/util/error.h"
#include "tests/integration/f32_file.h"
#include "tests/integration/process.h"
#include "tests/integration/synth_model.h"
#include "tests/support/child_process.h"

using namespace waste::test;

namespace {

size_t argmax(const float* row, size_t n) { return size_t(std::max_element(row, row + n) - row); }

std::string run_ok(const std::string& cmd) {
  CommandResult r = run_command(cmd);
  INFO(cmd);
  INFO(r.output);
  REQUIRE_EQ(r.status, 0);
  return r.output;
}

// Max |a - b| over the first `rows` rows, and whether every row has the same argmax.
void check_close(const std::vector<float>& got, const std::vector<float>& ref, size_t rows, size_t vocab,
                 double tol, const std::string& what) {
  REQUIRE(got.size() >= rows * vocab);
  REQUIRE(ref.size() >= rows * vocab);
  double max_diff = 0;
  size_t agree = 0;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t v = 0; v < vocab; ++v)
      max_diff = std::max(max_diff, std::fabs(double(got[r * vocab + v]) - double(ref[r * vocab + v])));
    agree += argmax(&got[r * vocab], vocab) == argmax(&ref[r * vocab], vocab);
  }
  MESSAGE(what << ": max |diff| " << max_diff << ", argmax agrees on " << agree << "/" << rows);
  CHECK(max_diff <= tol);
  CHECK(agree == rows);
}

size_t fixture_vocab(const std::string& dir) {
  nlohmann::json c = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  if (c.contains("text_config")) c = c["text_config"];
  return c["vocab_size"].get<size_t>();
}

}  // namespace

TEST_CASE("every fixture, converted lossless, matches its reference logits through eval (prefill and --step)") {
  const std::string fixtures = shared_dir() + "/fixtures";
  REQUIRE(std::filesystem::is_directory(fixtures));
  TempDir tmp;
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fixtures)) {
    if (!entry.is_directory()) continue;
    const std::string dir = entry.path().string(), name = entry.path().filename().string();
    CAPTURE(name);
    const std::string model = tmp / (name + ".waste");
    run_ok(waste_bin() + " convert " + dir + " --out " + model + " --experts f32 --trunk f32 --no-progress");
    const size_t V = fixture_vocab(dir);

    // Prefill: the 24 prompt rows, experts through a private iod.
    run_ok(waste_bin() + " eval " + model + " --no-progress --tokens " + dir + "/tokens.json --logits " +
           (tmp / "prefill.f32"));
    const auto ref = read_f32(dir + "/reference_logits.f32");
    check_close(read_f32(tmp / "prefill.f32"), ref, ref.size() / V, V, 1e-3, name + " prefill");

    // Decode: all 40 ids one at a time (rows 24..39 follow the greedy continuation), in-process.
    run_ok(waste_bin() + " eval " + model + " --no-progress --no-iod --step --key full_ids --tokens " + dir +
           "/reference_greedy.json --logits " + (tmp / "step.f32"));
    const auto all = read_f32(dir + "/reference_logits_all.f32");
    const auto step = read_f32(tmp / "step.f32");
    check_close(step, all, all.size() / V, V, 1e-3, name + " decode steps");
    // The greedy continuation: row t's argmax is the id fed at t + 1.
    const nlohmann::json greedy = nlohmann::json::parse(std::ifstream(dir + "/reference_greedy.json"));
    const auto full = greedy["full_ids"].get<std::vector<size_t>>();
    const size_t prompt = greedy["prompt_ids"].size();
    for (size_t t = prompt - 1; t + 1 < full.size(); ++t) CHECK(argmax(&step[t * V], V) == full[t + 1]);
    ++seen;
  }
  CHECK(seen >= 4);
}

TEST_CASE("placement never changes the logits: iod budgets, prefetch, in-process; chunk sizes only round") {
  TempDir tmp;
  for (const std::string preset : {"tiny-kimi-linear", "tiny-k3", "tiny-k2"}) {
    CAPTURE(preset);
    const std::string model = tmp / (preset + ".waste");
    synth_model(model, "--preset " + preset + " --seed 3");
    // 40 fixed pseudo-random ids (random weights would collapse into one repeated token).
    std::mt19937 g(11);
    nlohmann::json ids = nlohmann::json::array();
    for (int i = 0; i < 40; ++i) ids.push_back(int(g() % 4000));
    std::ofstream(tmp / "ids.json") << ids.dump();
    auto eval = [&](const std::string& out, const std::string& args) {
      run_ok(waste_bin() + " eval " + model + " --no-progress --tokens " + (tmp / "ids.json") + " --logits " +
             (tmp / out) + " " + args);
      return read_f32(tmp / out);
    };
    const auto base = eval("inproc.f32", "--no-iod --chunk 32");
    REQUIRE(base.size() == 40u * 4096u);
    // Floor (one layer's experts: top_k = 4 slots; a 32-token chunk's union is fetched in
    // groups), everything cached, prefetch off.
    CHECK(eval("floor.f32", "--slots 4 --chunk 32") == base);
    CHECK(eval("all.f32", "--slots 512 --chunk 32") == base);
    CHECK(eval("noprefetch.f32", "--slots 6 --lookahead 0 --chunk 32") == base);
    // Decode steps: same bits through iod at the floor as in-process.
    const auto step = eval("step.f32", "--no-iod --step");
    CHECK(eval("step_floor.f32", "--slots 4 --step") == step);
    CHECK(eval("step_all.f32", "--slots 512 --step --lookahead 0") == step);
    // Chunk sizes: same argmax everywhere, relative difference within 1e-5.
    for (int chunk : {1, 7}) {
      const auto c = eval("chunk.f32", "--no-iod --chunk " + std::to_string(chunk));
      double worst = 0, scale = 0;
      for (size_t i = 0; i < base.size(); ++i) {
        worst = std::max(worst, std::fabs(double(c[i]) - double(base[i])));
        scale = std::max(scale, std::fabs(double(base[i])));
      }
      MESSAGE(preset << " chunk " << chunk << " vs 32: max |diff| " << worst << " (max |logit| " << scale << ")");
      CHECK(worst <= 1e-5 * scale);
      for (size_t r = 0; r < 40; ++r) CHECK(argmax(&c[r * 4096], 4096) == argmax(&base[r * 4096], 4096));
    }
  }
}

TEST_CASE("waste run: streamed text is a function of prompt and seed, through iod or in-process") {
  TempDir tmp;
  const std::string model = tmp / "m.waste";
  synth_model(model, "--preset tiny-kimi-linear --seed 5");
  // The generated text is the stdout line that starts with the prompt.
  auto text = [&](const std::string& args) {
    const std::string out = run_ok(waste_bin() + " run " + model + " \"Once upon\" -n 12 --no-progress " + args);
    const size_t at = out.find("Once upon");
    REQUIRE(at != std::string::npos);
    CHECK(out.find("tok/s") != std::string::npos);
    CHECK(out.find("misses") != std::string::npos);
    return out.substr(at, out.find('\n', at) - at);
  };
  const std::string a = text("--temp 0.9 --seed 7 --no-iod");
  CHECK(a.size() > std::string("Once upon").size());
  CHECK(text("--temp 0.9 --seed 7 --no-iod") == a);
  CHECK(text("--temp 0.9 --seed 7 --slots 4") == a);
  CHECK(text("--temp 0.9 --seed 8 --no-iod") != a);
  CHECK(text("--slots 8") == text("--no-iod"));  // greedy
}

// VQ3R's own error, with an f32 trunk so that nothing else rounds: the mean |logit error| as a
// share of the error of a predictor that knows nothing (each row's mean logit), and the top-1
// agreement with the reference. Measured 2026-12-02: kimi-linear 0.33 and 12/24, deepseek-v3
// 0.27 and 13/24, kimi-k3 0.64 and 11/24 (6 layers, 5 of them MoE over 32 experts: the error
// compounds over more layers; these random 16-32 expert fixtures are a hard case for a 3-bit
// codebook). The bounds leave room for encoder changes (a quarter more error, a third fewer
// agreements), and a kernel or codebook defect lands far outside them (a share near 1 or more,
// agreement near chance: 1/512).
TEST_CASE("VQ3R experts: logit error and top-1 agreement within bounds on every fixture") {
  TempDir tmp;
  const std::map<std::string, std::pair<double, size_t>> bounds = {
      {"kimi-linear", {0.41, 8}}, {"deepseek-v3", {0.34, 8}}, {"kimi-k3", {0.80, 7}}};
  for (const auto& entry : bounds) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture one
    const auto& bound = entry.second;
    CAPTURE(name);
    const std::string dir = shared_dir() + "/fixtures/" + name, model = tmp / (name + ".waste");
    run_ok(waste_bin() + " convert " + dir + " --out " + model + " --trunk f32 --no-progress");
    const std::string out = run_ok(waste_bin() + " eval " + model + " --no-progress --no-iod --tokens " + dir +
                                   "/tokens.json --logits " + (tmp / "vq.f32"));
    const std::vector<float> got = read_f32(tmp / "vq.f32"), ref = read_f32(dir + "/reference_logits.f32");
    const size_t vocab = fixture_vocab(dir), rows = ref.size() / vocab;
    REQUIRE(rows > 0);
    REQUIRE(got.size() == ref.size());
    double err = 0, null_err = 0;
    size_t agree = 0;
    for (size_t r = 0; r < rows; ++r) {
      const float* g = &got[r * vocab];
      const float* f = &ref[r * vocab];
      double mean = 0;
      for (size_t v = 0; v < vocab; ++v) mean += f[v];
      mean /= double(vocab);
      for (size_t v = 0; v < vocab; ++v) {
        err += std::fabs(double(g[v]) - double(f[v]));
        null_err += std::fabs(double(f[v]) - mean);
      }
      agree += argmax(g, vocab) == argmax(f, vocab);
    }
    const double share = err / null_err;
    MESSAGE(name << " VQ3R, f32 trunk: mean |error| " << err / double(rows * vocab) << " = " << share
                 << " of the null predictor's; top-1 agreement " << agree << "/" << rows);
    CHECK(share <= bound.first);
    CHECK(agree >= bound.second);
  }
}

TEST_CASE("iod killed mid-request: the command fails with a clear error, no crash, no hang") {
  TempDir tmp;
  const std::string model = tmp / "m.waste", run = tmp / "run";
  synth_model(model, "--preset tiny-kimi-linear --seed 9");
  std::filesystem::create_directories(run);
  std::filesystem::permissions(run, std::filesystem::perms::owner_all);
  const char* iod_env = std::getenv("WASTE_IOD");
  REQUIRE(iod_env != nullptr);
  // The iods and the bench are children of this test (exec'd by sh, with their output in log
  // files), killed and reaped however the test ends. The segment in /dev/shm by name (--shm
  // named): the one a kill -9 leaves behind (iod's private huge-page file has no name to leave).
  auto start_iod = [&](const std::string& log) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        "sh", "-c", "exec " + std::string(iod_env) + " --model " + model + " --run-dir " + run +
                        " --slots 6 --shm named > " + log + " 2>&1"});
  };
  const auto iod = start_iod(tmp / "iod.log");
  REQUIRE(iod->started());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto poll = [&] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };  // bounded by the deadline
  while (!std::filesystem::exists(run + "/iod.sock") && std::chrono::steady_clock::now() < deadline) poll();
  REQUIRE(std::filesystem::exists(run + "/iod.sock"));
  // A long decode against that iod (bounded by timeout in case the error path hangs).
  ChildProcess bench({"sh", "-c", "timeout 120 " + waste_bin() + " bench " + model + " --run-dir " + run +
                                      " -n 1000000 --no-progress > " + (tmp / "bench.log") + " 2>&1; echo $? > " +
                                      (tmp / "bench.rc")});
  REQUIRE(bench.started());
  // Once the bench is fetching (iod counted misses), kill iod without warning.
  {
    waste::ipc::ExpertStoreClient probe(run + "/iod.sock");
    while (probe.stats().value("misses", uint64_t(0)) == 0 && std::chrono::steady_clock::now() < deadline) poll();
  }
  REQUIRE(::kill(iod->pid(), SIGKILL) == 0);
  iod->wait_exit(10);  // reaps it
  while (!std::filesystem::exists(tmp / "bench.rc") && std::chrono::steady_clock::now() < deadline) poll();
  REQUIRE(std::filesystem::exists(tmp / "bench.rc"));
  std::string rc, log;
  std::getline(std::ifstream(tmp / "bench.rc"), rc);
  std::ifstream lf(tmp / "bench.log");
  log.assign(std::istreambuf_iterator<char>(lf), std::istreambuf_iterator<char>());
  INFO(log);
  CHECK(rc == "1");  // waste::Error, not a crash (>= 128) or the timeout (124)
  CHECK(log.find("waste: error: iod") != std::string::npos);

  // The killed iod left its shared memory segment behind. A new iod in the same run directory
  // must find and remove it (the recovery path), and leaves nothing behind when stopped.
  const auto again = start_iod(tmp / "iod2.log");
  REQUIRE(again->started());
  // The dead iod's socket file is still there: wait until the new one answers.
  bool answering = false;
  while (!answering && std::chrono::steady_clock::now() < deadline) {
    try {
      waste::ipc::ExpertStoreClient probe(run + "/iod.sock");
      probe.stats();
      answering = true;
    } catch (const std::exception&) {
      poll();
    }
  }
  REQUIRE(answering);
  REQUIRE(::kill(again->pid(), SIGTERM) == 0);
  again->wait_exit(30);
  while (std::filesystem::exists(run + "/iod.sock") && std::chrono::steady_clock::now() < deadline) poll();
  std::ifstream l2(tmp / "iod2.log");
  const std::string log2((std::istreambuf_iterator<char>(l2)), std::istreambuf_iterator<char>());
  INFO(log2);
  CHECK(log2.find("removed stale segment") != std::string::npos);
}

TEST_CASE("waste bench --timeline: one Chrome trace with compute's and the private iod's spans on one clock") {
  TempDir tmp;
  const std::string model = tmp / "m.waste";
  synth_model(model, "--preset tiny-kimi-linear --seed 4");
  const std::string trace = tmp / "timeline.json";
  run_ok(waste_bin() + " bench " + model + " --no-progress -n 3 --prefill 8 --slots 10 --timeline " + trace);
  std::ifstream f(trace);
  const auto j = nlohmann::json::parse(f);
  const auto& ev = j.at("traceEvents");
  std::map<std::string, int> processes;  // process name -> pid
  for (const auto& e : ev)
    if (e.at("ph") == "M") processes[e.at("args").at("name").get<std::string>()] = e.at("pid").get<int>();
  REQUIRE(processes.size() == 2);
  const int iod = processes.at("waste-iod"), compute = processes.at("waste (compute)");
  // Per (layer, expert): iod's read spans [start, end] and compute's expert_ready instants.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> reads;
  std::vector<std::tuple<int, int, double>> ready;
  std::map<std::string, int> names;
  for (const auto& e : ev) {
    if (e.at("ph") == "M") continue;
    const std::string name = e.at("name").get<std::string>();
    const int pid = e.at("pid").get<int>();
    ++names[name];
    if (name == "read") {
      CHECK(pid == iod);
      const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
      reads[{e.at("args").at("layer").get<int>(), e.at("args").at("expert").get<int>()}].push_back({ts, ts + dur});
    } else if (name == "expert_ready") {
      CHECK(pid == compute);
      ready.emplace_back(e.at("args").at("layer").get<int>(), e.at("args").at("expert").get<int>(),
                         e.at("ts").get<double>());
    }
  }
  for (const char* n : {"attention", "router", "fetch_issue", "fetch_wait", "expert_kernel", "head", "read",
                        "demand_queued", "expert_ready"})
    CHECK_MESSAGE(names[n] > 0, n);
  // One clock: a record compute saw READY was read before (iod stamps a read's end before it
  // publishes READY), so the latest read of it that started earlier has ended by then.
  int checked = 0;
  for (const auto& [layer, expert, t] : ready) {
    auto it = reads.find({layer, expert});
    if (it == reads.end()) continue;  // read before the trace window? (not in this run) or pre-warmed
    const std::pair<double, double>* last = nullptr;
    for (const auto& r : it->second)
      if (r.first <= t && (!last || r.first > last->first)) last = &r;
    if (!last) continue;
    CHECK(last->second <= t + 0.01);  // microseconds, 3 decimals written
    ++checked;
  }
  CHECK(checked > 10);
  CHECK_FALSE(std::filesystem::exists(trace + ".compute.part"));
  CHECK_FALSE(std::filesystem::exists(trace + ".iod.part"));
}

TEST_CASE("waste bench --resident refuses the options of the expert path through iod by name, --pinned-reads too") {
  TempDir tmp;
  const std::string model = tmp / "m.waste";
  synth_model(model, "--preset tiny-kimi-linear --seed 4");
  for (const std::string& extra :
       std::vector<std::string>{"--pinned-reads", "--no-iod", "--budget 4G", "--slots 10", "--working-sets 1",
                                "--run-dir " + (tmp / "run"), "--usage"}) {
    const auto r = run_command(waste_bin() + " bench " + model + " --resident --no-progress -n 1 " + extra);
    INFO(extra, ": ", r.output);
    CHECK_NE(r.status, 0);
    CHECK(r.output.find("excludes") != std::string::npos);
    CHECK(r.output.find(extra.substr(0, extra.find(' '))) != std::string::npos);
  }
  // --pinned-reads is refused beside --no-iod too; through iod it is taken and said.
  const auto r = run_command(waste_bin() + " bench " + model + " --no-iod --pinned-reads --no-progress -n 1");
  CHECK_NE(r.status, 0);
  CHECK(r.output.find("excludes") != std::string::npos);
  const auto ok = run_command(waste_bin() + " bench " + model + " --pinned-reads --slots 40 --no-progress -n 2");
  INFO(ok.output);
  CHECK_EQ(ok.status, 0);
  CHECK(ok.output.find("every layer fetched and pinned") != std::string::npos);
  CHECK(ok.output.find("unpinned reads: 0 of 6 MoE layers") != std::string::npos);
}
