// iod end to end with real processes: waste-iod on small synthetic containers, clients over the
// ExpertStore RPC and the shared-memory segment, and the failure paths (client killed with -9,
// SIGTERM, restart after kill -9, corrupt record, forced pread).
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "compute/experts/iod_experts.h"
#include "iod/cache/usage_file.h"
#include "iod/io/io_choice.h"
#include "shared/container/reader.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/ipc/shm_segment.h"
#include "shared/plan/memory_plan.h"
#include "shared/platform/shm.h"
#include "shared/util/error.h"
#include "tests/integration/gate_fifo.h"
#include "tests/integration/process.h"
#include "tests/integration/scoped_env.h"
#include "tests/integration/synth_model.h"
#include "tools/iobench/private_iod.h"
#include "tests/io_uring_probe.h"
#include "tests/skip.h"
#include "tests/support/child_process.h"

using namespace waste;
using namespace waste::test;
using waste::iobench::PrivateIod;

namespace {

std::string synth_tiny(const TempDir& tmp) { return synth_model(tmp / "tiny.waste", "--preset tiny-kimi-linear"); }

std::vector<std::string> iod_args(const std::string& model, uint32_t slots, const std::string& io = iod::kDefaultIo) {
  return {"--model", model, "--slots", std::to_string(slots), "--io", io, "--qd", "4"};
}

using platform::shm_exists;

// The same with the segment in /dev/shm by name whatever its pages (iod --shm named): for the
// cases about named segments left behind.
std::vector<std::string> named_segment(std::vector<std::string> args) {
  args.insert(args.end(), {"--shm", "named"});
  return args;
}

// A segment iod announced exists: a /dev/shm name, or iod's private file by its descriptor path.
bool segment_exists(const std::string& name) {
  return !name.empty() && name[0] == '/' ? std::filesystem::exists(name) : shm_exists(name);
}

// Checks every handle's bytes against the reader's copy of the record.
void check_records(const Container& c, ipc::ExpertStoreClient& client, uint32_t layer,
                   const std::vector<uint32_t>& experts, const std::vector<ipc::SlotHandle>& hs) {
  REQUIRE_EQ(hs.size(), experts.size());
  const auto* l = c.expert_layer(int(layer));
  std::vector<uint8_t> want(l->layout.stride);
  for (size_t i = 0; i < hs.size(); ++i) {
    const uint8_t* got = client.wait(hs[i], 10'000'000'000);
    c.read_record(int(layer), experts[i], want.data());
    CHECK(std::memcmp(got, want.data(), want.size()) == 0);
  }
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char ch;
  f.read(&ch, 1);
  ch = char(ch ^ 0x5a);
  f.seekp(std::streamoff(offset));
  f.write(&ch, 1);
}

// A tiny synthetic model served by a private iod of `slots` slots; l0 is its first MoE layer.
struct TinyIod {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  PrivateIod iod;
  explicit TinyIod(uint32_t slots) : iod(iod_args(model, slots), tmp / "run") {}
};

// Polls stats until `pred` holds (bounded; the daemon notices a dead peer asynchronously).
template <typename P>
nlohmann::json wait_stats(ipc::ExpertStoreClient& c, P pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  nlohmann::json s = c.stats();
  while (!pred(s) && std::chrono::steady_clock::now() < deadline) s = c.stats();
  return s;
}

}  // namespace

TEST_CASE("iod: fetch, prefetch and release return the container's records") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  const auto& layers = c.expert_layers();
  REQUIRE(layers.size() >= 2);
  const uint32_t l0 = uint32_t(layers[0].layer), l1 = uint32_t(layers[1].layer);
  const uint32_t n_exp = layers[0].expert_count;
  PrivateIod iod(iod_args(model, 16), tmp / "run");
  CHECK_EQ(std::filesystem::status(tmp / "run").permissions() & std::filesystem::perms::all,
           std::filesystem::perms::owner_all);
  ipc::ExpertStoreClient client(iod.socket_path(), c.container_id());
  CHECK_EQ(client.info().layout.slot_count, 16u);
  CHECK_EQ(client.info().layout.slot_bytes % 4096, 0u);
  CHECK(segment_exists(client.info().segment_name));

  std::vector<uint32_t> ex = {0, 5, 7};
  auto hs = client.fetch(l0, ex);
  check_records(c, client, l0, ex, hs);
  auto s = client.stats();
  CHECK_EQ(s["misses"].get<uint64_t>(), 3u);
  CHECK_EQ(s["hits"].get<uint64_t>(), 0u);
  // io_uring where built and the kernel gives one; a build with it on a kernel without says why
  // it reads with the pread pool (qemu-user, seccomp); a build without it uses the pread pool.
  if (!iod::kHaveUring)
    CHECK(s["io_path"].get<std::string>().find("pread pool") != std::string::npos);
  else if (waste::test::io_uring_unavailable().empty())
    CHECK(s["io_path"].get<std::string>().rfind("io_uring (READ_FIXED", 0) == 0);
  else
    CHECK(s["io_path"].get<std::string>().find("pread pool of 4 threads (io_uring unavailable: ") == 0);

  // A prefetch is a hint: it starts reads of what is not cached; a later demand hits.
  std::vector<uint32_t> pre = {1, 2, 5};
  CHECK_EQ(client.prefetch(l0, pre), 2u);  // 5 is cached already
  std::vector<uint32_t> ex2 = {1, 2, 9};
  auto hs2 = client.fetch(l0, ex2, hs);    // releases the first fetch on the way
  check_records(c, client, l0, ex2, hs2);
  s = client.stats();
  CHECK_EQ(s["hits"].get<uint64_t>(), 2u);
  CHECK_EQ(s["misses"].get<uint64_t>(), 4u);
  CHECK_EQ(s["prefetch"]["issued"].get<uint64_t>(), 2u);
  CHECK_EQ(s["prefetch"]["used"].get<uint64_t>(), 2u);
  CHECK_GE(s["bytes_read"].get<uint64_t>(), 6 * layers[0].layout.stride);

  // The released handles are stale for release now; out-of-range requests are errors.
  CHECK_THROWS_WITH_AS(client.release(hs), doctest::Contains("not pinned by this connection"), Error);
  CHECK_THROWS_WITH_AS(client.fetch(l0, std::vector<uint32_t>{n_exp}), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(client.fetch(9999, std::vector<uint32_t>{0}), doctest::Contains("not a MoE layer"), Error);
  CHECK_THROWS_WITH_AS(client.release(std::vector<ipc::SlotHandle>{{999, 1}}), doctest::Contains("out of range"),
                       Error);
  // Each refusal reaches the client typed, naming the request field at fault (compute acts on
  // the kind, never on the text).
  auto refusal = [](auto&& call) -> std::pair<ErrorKind, std::string> {
    try {
      call();
    } catch (const Error& e) {
      CHECK(e.relayed());
      return {e.kind(), e.param()};
    }
    FAIL("no error");
    return {};
  };
  using Refusal = std::pair<ErrorKind, std::string>;
  CHECK(refusal([&] { client.release(hs); }) == Refusal{ErrorKind::InvalidRequest, "handles"});
  CHECK(refusal([&] { client.fetch(l0, std::vector<uint32_t>{0}, hs); }) == Refusal{ErrorKind::InvalidRequest, "releases"});
  CHECK(refusal([&] { client.fetch(l0, std::vector<uint32_t>{n_exp}); }) == Refusal{ErrorKind::InvalidRequest, "experts"});
  CHECK(refusal([&] { client.fetch(9999, std::vector<uint32_t>{0}); }) == Refusal{ErrorKind::InvalidRequest, "layer"});
  CHECK(refusal([&] { client.release(std::vector<ipc::SlotHandle>{{999, 1}}); }) ==
        Refusal{ErrorKind::InvalidRequest, "handles"});
  CHECK(refusal([&] { client.trace_start("relative.jsonl"); }) == Refusal{ErrorKind::InvalidRequest, "path"});
  CHECK(refusal([&] { ipc::ExpertStoreClient other(iod.socket_path(), c.container_id() == 7 ? 8 : 7); }) ==
        Refusal{ErrorKind::InvalidRequest, "containerId"});
  // Still serving after the errors.
  std::vector<uint32_t> ex3 = {3, 4};
  auto hs3 = client.fetch(l1, ex3, hs2);
  check_records(c, client, l1, ex3, hs3);

  // Pinned slots are never evicted: with 16 slots, 2 pinned, 15 more pins cannot fit.
  std::vector<uint32_t> many;
  for (uint32_t e = 10; e < 25; ++e) many.push_back(e);
  CHECK_THROWS_WITH_AS(client.fetch(l0, many), doctest::Contains("pinned"), Error);
  CHECK(refusal([&] { client.fetch(l0, many); }) == Refusal{ErrorKind::InvalidRequest, "experts"});
  many.pop_back();
  auto hs4 = client.fetch(l0, many);  // 14 + 2 = 16 fits
  check_records(c, client, l0, many, hs4);
  for (const auto& h : hs3) CHECK_EQ(client.state(h), ipc::SlotState::Ready);  // not evicted
  client.release(hs4);
  client.release(hs3);

  // A request trace: one JSON line per request.
  // A trace is a new file at an absolute path: a peer cannot make iod overwrite, append to
  // (through a symlink) or create relative to iod's own directory a file of its choosing.
  {
    const std::string victim = tmp / "victim.txt", link = tmp / "link.jsonl";
    { std::ofstream(victim) << "keep"; }
    std::filesystem::create_symlink(victim, link);
    CHECK_THROWS_WITH_AS(client.trace_start(victim), doctest::Contains("File exists"), Error);
    CHECK_THROWS_WITH_AS(client.trace_start(link), doctest::Contains("cannot create"), Error);
    CHECK_THROWS_WITH_AS(client.trace_start("relative.jsonl"), doctest::Contains("absolute path"), Error);
    std::ifstream vf(victim);
    CHECK(std::string(std::istreambuf_iterator<char>(vf), {}) == "keep");
    CHECK(!std::filesystem::exists("relative.jsonl"));
  }
  std::string trace = tmp / "requests.jsonl";
  client.trace_start(trace);
  auto hs5 = client.fetch(l1, ex3);
  client.prefetch(l1, std::vector<uint32_t>{6});
  CHECK_EQ(client.trace_stop(), 2u);
  std::ifstream tf(trace);
  std::string line;
  REQUIRE(std::getline(tf, line));
  auto j = nlohmann::json::parse(line);
  CHECK_EQ(j["op"], "fetch");
  CHECK_EQ(j["layer"].get<uint32_t>(), l1);
  CHECK_EQ(j["experts"], nlohmann::json(ex3));
  CHECK_EQ(iod.stop(), 0);
}

TEST_CASE("iod: --io pread forces the pread pool and serves the same bytes") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  PrivateIod iod(iod_args(model, 8, "pread"), tmp / "run");
  ipc::ExpertStoreClient client(iod.socket_path());
  std::vector<uint32_t> ex = {2, 3, 31, 0};
  auto hs = client.fetch(l0, ex);
  check_records(c, client, l0, ex, hs);
  auto s = client.stats();
  CHECK(s["io_path"].get<std::string>().find("pread") != std::string::npos);
  CHECK(s["io_path"].get<std::string>().find("forced") != std::string::npos);
  CHECK_EQ(s["failures"].get<uint64_t>(), 0u);
}

TEST_CASE("iod --read-chunk: records read in chunks are whole; bad values and --qd out of range are refused by name") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  const uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  REQUIRE_GT(c.expert_layer(int(l0))->layout.stride, 2u * 4096u);  // several chunks a record
  {
    std::vector<std::string> args = iod_args(model, 8);
    args.insert(args.end(), {"--read-chunk", "4K"});
    PrivateIod iod(args, tmp / "run");
    ipc::ExpertStoreClient client(iod.socket_path(), c.container_id());
    const std::string path = client.stats()["io_path"].get<std::string>();
    if (path.find("io_uring") == std::string::npos) {
      waste::test::skip_part("io_uring unavailable here (" + path + "): chunked reads unchecked");
    } else {
      CHECK_MESSAGE(path.find("reads of at most 4 KiB") != std::string::npos, path);
      std::vector<uint32_t> ex = {2, 3, 31, 0, 7};
      check_records(c, client, l0, ex, client.fetch(l0, ex));
      CHECK_EQ(client.stats()["failures"].get<uint64_t>(), 0u);
    }
  }
  const std::string iod_cmd = iobench::find_iod_binary() + " --model " + model + " --run-dir " + (tmp / "bad") + " --slots 8";
  // Not a structured binding: CAPTURE's lambda cannot name one before clang 16.
  for (const auto& bad : std::vector<std::pair<std::string, std::string>>{
           {"--read-chunk 5000", "--read-chunk 5000: must be 0 (whole records) or a multiple of 4 KiB"},
           {"--read-chunk 2Q", "--read-chunk"},
           {"--read-chunk 2G", "--read-chunk 2G: must be 0 (whole records) or a multiple of 4 KiB up to 1024 MiB"},
           {"--io pread --read-chunk 1M", "--read-chunk 1M: the pread pool reads whole records"},
           {"--qd 0", "--qd: Value 0 not in range 1 to 256"},
           {"--qd 257", "--qd: Value 257 not in range 1 to 256"}}) {
    const std::string& flags = bad.first;
    const std::string& says = bad.second;
    auto r = run_command(iod_cmd + " " + flags);
    CAPTURE(flags);
    CHECK_NE(r.status, 0);
    CHECK_MESSAGE(r.output.find(says) != std::string::npos, r.output);
  }
}

TEST_CASE("iod: a client killed with -9 loses its pins") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  PrivateIod iod(iod_args(model, 8), tmp / "run");
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  OwnedPid child(::fork());  // killed and reaped on every exit path
  REQUIRE(child.get() >= 0);
  if (child.get() == 0) {
    // Pins every slot, tells the parent, then waits to be killed.
    ::close(pipefd[0]);
    try {
      ipc::ExpertStoreClient victim(iod.socket_path());
      std::vector<uint32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
      auto hs = victim.fetch(l0, all);
      for (const auto& h : hs) victim.wait(h);
      char ok = 1;
      if (::write(pipefd[1], &ok, 1) != 1) ::_exit(2);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(3);
    }
  }
  ::close(pipefd[1]);
  char ok = 0;
  REQUIRE_EQ(::read(pipefd[0], &ok, 1), 1);
  ::close(pipefd[0]);
  // While the victim lives every slot is pinned: a fetch from another client waits (it does not
  // fail) and is served once the victim's pins are gone. The waiting fetch runs on its own
  // thread (a client belongs to one thread); the main thread sees it is waiting through stats.
  std::vector<uint8_t> waited_record;
  std::string waiter_error;
  const std::string trace = tmp / "waiting.jsonl";
  {
    ipc::ExpertStoreClient t(iod.socket_path());
    t.trace_start(trace);  // iod writes each request's line as it takes the request
  }
  std::thread waiter([&] {
    try {
      ipc::ExpertStoreClient w(iod.socket_path());
      auto hs = w.fetch(l0, std::vector<uint32_t>{20});
      const uint8_t* rec = w.wait(hs[0], 10'000'000'000);
      waited_record.assign(rec, rec + c.expert_layers()[0].layout.stride);
    } catch (const std::exception& e) {
      waiter_error = e.what();
    }
  });
  {
    // Until the waiter's fetch is in the trace, iod has not taken it (bounded poll).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool taken = false;
    while (!taken && std::chrono::steady_clock::now() < deadline) {
      std::ifstream f(trace);
      std::string line;
      taken = bool(std::getline(f, line)) && line.find("\"fetch\"") != std::string::npos;
    }
    REQUIRE(taken);
    ipc::ExpertStoreClient client(iod.socket_path());
    auto s = client.stats();
    CHECK_EQ(s["misses"].get<uint64_t>(), 8u);  // the waiting fetch has not been served
    client.trace_stop();
  }
  child.kill_and_reap();
  waiter.join();
  CHECK_EQ(waiter_error, "");
  {
    std::vector<uint8_t> want(c.expert_layers()[0].layout.stride);
    c.read_record(int(l0), 20, want.data());
    CHECK(waited_record == want);
  }
  ipc::ExpertStoreClient client(iod.socket_path());
  auto s = wait_stats(client, [](const nlohmann::json& s) { return s["connections"].get<uint32_t>() == 1; });
  CHECK_EQ(s["connections"].get<uint32_t>(), 1u);
  std::vector<uint32_t> other = {20, 21, 22, 23, 24, 25, 26, 27};
  auto hs = client.fetch(l0, other);  // needs every slot: the victim's pins are gone
  check_records(c, client, l0, other, hs);
}

TEST_CASE("iod --shm: huge-file serves the records from its private file, named from /dev/shm; a bad value is refused by name") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  const uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  std::string why;
  const int probe = platform::create_private_huge_shm(4096, why);
  if (probe < 0) {
    waste::test::skip_part("private huge-page files refused here (" + why + "): --shm huge-file unchecked");
  } else {
    ::close(probe);
    std::vector<std::string> args = iod_args(model, 8);
    args.insert(args.end(), {"--shm", "huge-file"});
    PrivateIod iod(args, tmp / "huge");
    ipc::ExpertStoreClient client(iod.socket_path(), c.container_id());
    const std::string seg = client.info().segment_name;
    CHECK_EQ(seg.rfind("/proc/" + std::to_string(iod.pid()) + "/fd/", 0), 0u);
    CHECK_FALSE(shm_exists(ipc::segment_name(ipc::instance_id_for(tmp / "huge"), c.container_id())));
    std::vector<uint32_t> ex = {1, 2, 3};
    check_records(c, client, l0, ex, client.fetch(l0, ex));
  }
  {
    PrivateIod iod(named_segment(iod_args(model, 8)), tmp / "named");
    ipc::ExpertStoreClient client(iod.socket_path(), c.container_id());
    CHECK(shm_exists(client.info().segment_name));
    std::vector<uint32_t> ex = {4, 5};
    check_records(c, client, l0, ex, client.fetch(l0, ex));
  }
  auto r = run_command(iobench::find_iod_binary() + " --model " + model + " --run-dir " + (tmp / "bad") +
                       " --slots 8 --shm hugepages");
  CHECK_NE(r.status, 0);
  CHECK_MESSAGE(r.output.find("--shm: unknown segment backing 'hugepages'") != std::string::npos, r.output);
}

TEST_CASE("iod: SIGTERM removes segment and socket; a restart after kill -9 cleans the stale segment") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  std::string run = tmp / "run";
  std::string segment;
  {
    PrivateIod iod(named_segment(iod_args(model, 8)), run);
    {
      ipc::ExpertStoreClient client(iod.socket_path());
      segment = client.info().segment_name;
    }
    CHECK(shm_exists(segment));
    CHECK(std::filesystem::exists(run + "/iod.sock"));
    CHECK_EQ(iod.stop(), 0);
    CHECK_FALSE(shm_exists(segment));
    CHECK_FALSE(std::filesystem::exists(run + "/iod.sock"));
  }
  // kill -9: the segment and socket stay behind ...
  {
    PrivateIod iod(named_segment(iod_args(model, 8)), run);
    pid_t pid = iod.pid();
    ::kill(pid, SIGKILL);
    iod.stop();  // reaps it
    CHECK(shm_exists(segment));
    CHECK(std::filesystem::exists(run + "/iod.sock"));
  }
  // ... and the next start in the same run directory replaces them.
  PrivateIod iod(named_segment(iod_args(model, 8)), run);
  ipc::ExpertStoreClient client(iod.socket_path());
  CHECK_EQ(client.info().segment_name, segment);
  auto seg = ipc::ShmSegment::open_read_only(segment, client.info().layout, 0);
  CHECK_EQ(seg.header().iod_pid, uint32_t(iod.pid()));
  // A second daemon in the same run directory is refused (the instance lock).
  auto r = run_command(iobench::find_iod_binary() + " --model " + model + " --run-dir " + run + " --slots 8");
  CHECK_NE(r.status, 0);
  CHECK(r.output.find("another iod is running") != std::string::npos);
}

TEST_CASE("iod: a corrupt record fails its fetch with an error naming it; others still work") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  const auto& l = c.expert_layers()[1];
  const uint32_t layer = uint32_t(l.layer), bad = 6;
  flip_byte(l.bank_path, bad * l.layout.stride + 64 + 100);  // in the payload: checksum mismatch
  PrivateIod iod(iod_args(model, 8), tmp / "run");
  ipc::ExpertStoreClient client(iod.socket_path(), c.container_id());
  auto hs = client.fetch(layer, std::vector<uint32_t>{bad, 7});
  try {
    client.wait(hs[0], 10'000'000'000);
    FAIL("a corrupt record came back READY");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("layer " + std::to_string(layer)) != std::string::npos);
    CHECK(m.find("expert " + std::to_string(bad)) != std::string::npos);
    CHECK(m.find("checksum") != std::string::npos);
  }
  CHECK_EQ(client.state(hs[0]), ipc::SlotState::Failed);
  // Demanded again right after the failure was published: a miss that reads again, never a
  // hit that hands out the failure (FAILED and "no read outstanding" are published together).
  auto before = client.stats();
  auto again = client.fetch(layer, std::vector<uint32_t>{bad});
  auto after = client.stats();
  CHECK_EQ(after["hits"].get<uint64_t>(), before["hits"].get<uint64_t>());
  CHECK_EQ(after["misses"].get<uint64_t>(), before["misses"].get<uint64_t>() + 1);
  CHECK_THROWS_WITH_AS(client.wait(again[0], 10'000'000'000), doctest::Contains("checksum"), Error);
  client.release(again);
  check_records(c, client, layer, {7}, {hs[1]});
  auto hs2 = client.fetch(layer, std::vector<uint32_t>{8, 9}, hs);
  check_records(c, client, layer, {8, 9}, hs2);
  auto s = client.stats();
  CHECK_EQ(s["failures"].get<uint64_t>(), 2u);
  // Asked again, the record is read again and fails again: never READY with bad bytes.
  auto hs3 = client.fetch(layer, std::vector<uint32_t>{bad}, hs2);
  CHECK_THROWS_AS(client.wait(hs3[0], 10'000'000'000), Error);
}

// A tiny synthetic model and a private iod whose record checks the test holds (CheckGateFifo);
// the gate opens before iod stops, whatever ends the test (members go after the body).
struct CheckGatedIod {
  CheckGateFifo gate;
  ScopedEnv env;
  TempDir tmp;
  std::string model;
  Container c;
  std::optional<PrivateIod> iod;
  CheckGatedIod() : env({gate.env()}), model(synth_tiny(tmp)), c(Container::open(model)) {}
  ~CheckGatedIod() { gate.open(); }
  void start(const std::string& io = iod::kDefaultIo) { iod.emplace(iod_args(model, 8, io), tmp / "run"); }
};

TEST_CASE("IodExperts: a record is handed out while iod checks it; its use waits for READY, and a failed check drops it") {
  // iod holds every record in CHECKING until the gate lets its checksum run: what compute does in
  // between is what happens when a layer's last record lands and its kernels run beside its check.
  CheckGatedIod g;
  CheckGateFifo& gate = g.gate;
  Container& c = g.c;
  const auto& l = c.expert_layers()[0];
  const int layer = l.layer, good = 7, bad = 6;
  flip_byte(l.bank_path, uint64_t(bad) * l.layout.stride + 64 + 100);  // in the payload: checksum mismatch
  g.start();
  PrivateIod& iod = *g.iod;
  // A deadline of 1 s: the wait for a check that the gate holds ends within it.
  IodExperts src(c, iod.socket_path(), 1000, 50);
  std::array<ExpertSource::Ready, 4> out;
  std::vector<uint8_t> want(l.layout.stride);

  // A good record: handed out as soon as its bytes are in, its check still held.
  src.fetch_layer(layer, std::vector<int>{good});
  REQUIRE_EQ(src.next_ready_group(out), 1u);
  CHECK_EQ(out[0].index, 0);
  CHECK_EQ(src.handed_unchecked(), 1u);
  c.read_record(layer, uint32_t(good), want.data());
  CHECK(std::memcmp(out[0].view.gate - l.layout.gate_offset, want.data(), want.size()) == 0);
  // Not READY to anyone scanning the slot table (an unpinned read takes READY slots only).
  std::vector<ipc::ExpertStoreClient::ReadySlot> ready;
  src.client().ready_slots(ready);
  CHECK(std::none_of(ready.begin(), ready.end(), [&](const auto& r) { return int(r.expert) == good; }));
  // The model's next call is where that expert's use is confirmed: with the check held it waits
  // for READY, and its deadline names the check.
  CHECK_THROWS_WITH_AS(src.next_ready_group(out), doctest::Contains("still checking"), Error);
  gate.let(1);
  CHECK_EQ(src.next_ready_group(out), 0u);  // READY now: the layer is done, nothing lost
  CHECK_EQ(src.failed_after_handout(), 0u);
  src.end_layer();
  ready.clear();
  src.client().ready_slots(ready);
  CHECK(std::any_of(ready.begin(), ready.end(), [&](const auto& r) { return int(r.expert) == good; }));

  // A damaged record: handed out too, then its check fails. The next call throws it as lost
  // (the model drops what it made of it) before handing anything out, and the batch goes on.
  // (The usual deadline from here: nothing below waits on a held check.)
  IodExperts src2(c, iod.socket_path());
  src2.fetch_layer(layer, std::vector<int>{bad, good});
  // Until the damaged one (index 0) is handed out, CHECKING; the good one is a hit, READY, and
  // may come first.
  std::vector<int> handed;
  while (std::find(handed.begin(), handed.end(), 0) == handed.end()) {
    const size_t k = src2.next_ready_group(out);
    REQUIRE(k > 0);
    for (size_t i = 0; i < k; ++i) handed.push_back(out[i].index);
  }
  gate.let(1);
  try {
    src2.next_ready_group(out);
    FAIL("an expert whose check failed was not reported");
  } catch (const ExpertUnavailable& e) {
    CHECK_EQ(e.layer, layer);
    CHECK_EQ(e.expert, bad);
    CHECK_MESSAGE(std::string(e.what()).find("checksum") != std::string::npos, e.what());
  }
  CHECK_EQ(src2.failed_after_handout(), 1u);
  CHECK_EQ(src2.handed_unchecked(), 1u);
  // The good one, a hit (READY), was handed out no later than the damaged one: nothing is left.
  CHECK_EQ(handed.size(), 2u);
  CHECK_EQ(src2.next_ready_group(out), 0u);
  src2.end_layer();
  gate.open();
  CHECK_EQ(iod.stop(), 0);
}

TEST_CASE("IodExperts: the wait for records handed out CHECKING ends within one deadline, not one each") {
  // iod's pread pool checks on each of its threads, so two records can be CHECKING at once. The
  // gate lets the first one's check end at 1.2 s and holds the second: one deadline for the
  // settle ends it at 2 s; a deadline per record ran to 1.2 + 2 s.
  CheckGatedIod g;
  CheckGateFifo& gate = g.gate;
  Container& c = g.c;
  const int layer = c.expert_layers()[0].layer;
  g.start("pread");
  PrivateIod& iod = *g.iod;
  // Read one after the other, so expert 3's thread waits in the gate first and is let through
  // first (the gate passes one thread at a time).
  ipc::ExpertStoreClient reader(iod.socket_path(), c.container_id());
  std::vector<ipc::SlotHandle> held;
  for (uint32_t x : {3u, 4u}) {
    const auto h = reader.fetch(uint32_t(layer), std::vector<uint32_t>{x}, held);
    reader.wait(h[0], 10'000'000'000, ipc::ExpertStoreClient::Until::Landed);
    REQUIRE_EQ(reader.state(h[0]), ipc::SlotState::Checking);
    held = h;
  }
  reader.release(held);
  const int64_t deadline_ms = 2000;
  IodExperts src(c, iod.socket_path(), deadline_ms, 50);
  src.fetch_layer(layer, std::vector<int>{3, 4});
  std::array<ExpertSource::Ready, 4> out;
  REQUIRE_EQ(src.next_ready_group(out), 2u);
  REQUIRE_EQ(src.handed_unchecked(), 2u);
  const auto start = std::chrono::steady_clock::now();
  std::thread late_check([&] {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(1200));  // the scenario, not a sync
    gate.let(1);
  });
  CHECK_THROWS_WITH_AS(src.next_ready_group(out), doctest::Contains("still checking"), Error);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  late_check.join();
  CHECK_MESSAGE(took >= deadline_ms, "the settle ended after " << took << " ms");
  CHECK_MESSAGE(took < deadline_ms + 700, "the settle ended after " << took << " ms");
  gate.open();
  CHECK_EQ(src.next_ready_group(out), 0u);
  src.end_layer();
  CHECK_EQ(iod.stop(), 0);
}

TEST_CASE("iod: when the io_uring ring dies, reads in flight complete and the rest go to a pread pool") {
  if (const std::string why = waste::test::io_uring_unavailable(); !why.empty()) {
    waste::test::skip_part(why + ": no ring to die");
    return;
  }
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  std::optional<PrivateIod> iod;
  {
    const ScopedEnv hook({{"WASTE_IOD_TEST_URING_FAIL_AFTER", "3"}});  // the ring fails after 3 records
    iod.emplace(iod_args(model, 16), tmp / "run");
  }
  ipc::ExpertStoreClient client(iod->socket_path(), c.container_id());
  std::vector<uint32_t> ex = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto hs = client.fetch(l0, ex);
  check_records(c, client, l0, ex, hs);  // none hangs, none fails
  auto s = client.stats();
  CHECK_EQ(s["failures"].get<uint64_t>(), 0u);
  CHECK_EQ(s["misses"].get<uint64_t>(), 10u);
  CHECK(s["io_path"].get<std::string>().find("io_uring failed") != std::string::npos);
  std::vector<uint32_t> more = {11, 12};
  auto hs2 = client.fetch(l0, more, hs);
  check_records(c, client, l0, more, hs2);
  CHECK_EQ(iod->stop(), 0);
}

TEST_CASE("iod: a read the dead ring abandoned fails once; the record is read again into another slot") {
  if (!iod::kHaveUring) {
    waste::test::skip_part("built without io_uring: no ring to abandon a read");
    return;
  }
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  uint32_t l0 = uint32_t(c.expert_layers()[0].layer);
  std::optional<PrivateIod> iod;
  {
    // Test hooks: the ring dies with its first read prepared and abandons it.
    const ScopedEnv hooks({{"WASTE_IOD_TEST_URING_FAIL_AFTER", "1"}, {"WASTE_IOD_TEST_URING_ABANDON", "1"}});
    iod.emplace(iod_args(model, 8), tmp / "run");
  }
  ipc::ExpertStoreClient client(iod->socket_path(), c.container_id());
  if (client.stats()["io_path"].get<std::string>().rfind("io_uring", 0) != 0) {
    waste::test::skip_part("io_uring unavailable here");
    CHECK_EQ(iod->stop(), 0);
    return;
  }
  std::vector<uint32_t> ex = {1, 2, 3};
  auto hs = client.fetch(l0, ex);
  CHECK_THROWS_WITH_AS(client.wait(hs[0], 10'000'000'000), doctest::Contains("read abandoned"), Error);
  check_records(c, client, l0, {2, 3}, {hs[1], hs[2]});
  std::vector<uint32_t> one = {1};
  auto again = client.fetch(l0, one, hs);
  CHECK_NE(again[0].slot, hs[0].slot);
  check_records(c, client, l0, one, again);
  auto s = client.stats();
  CHECK_EQ(s["quarantined_slots"].get<uint32_t>(), 1u);
  CHECK_EQ(s["failures"].get<uint64_t>(), 1u);
  CHECK_GT(s["cpu_seconds"].get<double>(), 0.0);
  CHECK_EQ(iod->stop(), 0);
}

TEST_CASE("iod: fire-and-forget hints reach iod before the next fetch; a failing hint is counted, not thrown") {
  TinyIod t(16);
  const Container& c = t.c;
  const uint32_t l0 = t.l0;
  PrivateIod& iod = t.iod;
  ipc::ExpertStoreClient client(iod.socket_path(), c.container_id(), 4);
  CHECK(client.prefetch_async(l0, std::vector<uint32_t>{5, 6}));
  CHECK_NOTHROW(client.prefetch_async(9999, std::vector<uint32_t>{0}));  // not a MoE layer
  // The hints went out before this fetch on the same connection: iod has taken them (5 joins
  // or hits the prefetch), and their replies came back before the fetch's.
  std::vector<uint32_t> ex = {5};
  auto hs = client.fetch(l0, ex);
  check_records(c, client, l0, ex, hs);
  const ipc::HintStats& h = client.hint_stats();
  CHECK_EQ(h.sent, 2u);
  CHECK_EQ(h.outstanding, 0u);
  CHECK_EQ(h.failed, 1u);
  CHECK_EQ(h.dropped, 0u);
  CHECK(h.last_error.find("not a MoE layer") != std::string::npos);
  auto s = client.stats();
  CHECK_EQ(s["prefetch"]["issued"].get<uint64_t>(), 2u);
  CHECK_EQ(s["hits"].get<uint64_t>(), 1u);
  CHECK_EQ(s["misses"].get<uint64_t>(), 0u);
  CHECK_EQ(iod.stop(), 0);
}

TEST_CASE("iod: a client that stayed out of its event loop longer than its call deadline still gets answers") {
  // A compute thread computes between two RPCs without turning the client's event loop; the
  // next call's deadline must count from then, not from the loop's last turn (which would put
  // it in the past, and a daemon answering in microseconds would be reported as not answering).
  TinyIod t(16);
  ipc::ExpertStoreClient client(t.iod.socket_path(), t.c.container_id(), ipc::kDefaultHintCapacity, 300);
  CHECK(client.stats().contains("hits"));
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // the busy compute, not a synchronisation
  CHECK(client.stats().contains("hits"));
  std::vector<uint32_t> ex = {3};
  auto hs = client.fetch(t.l0, ex);
  check_records(t.c, client, t.l0, ex, hs);
  CHECK_EQ(t.iod.stop(), 0);
}

TEST_CASE("IodExperts: a layer's fetch is sent by fetch_layer and answered by the first next_ready") {
  TinyIod t(16);
  IodExperts src(t.c, t.iod.socket_path());
  const std::vector<int> want = {1, 4, 6, 9};
  src.fetch_layer(int(t.l0), want);
  CHECK(src.client().fetch_pending());  // sent, its answer not taken: the caller computes meanwhile
  std::vector<int> got;
  ExpertView v;
  for (int i; (i = src.next_ready(v)) >= 0;) {
    CHECK_FALSE(src.client().fetch_pending());
    got.push_back(want[size_t(i)]);
  }
  std::sort(got.begin(), got.end());
  CHECK(got == want);
  src.end_layer();
  // A second fetch_start while one is unanswered is refused, naming the layer.
  ipc::ExpertStoreClient& client = src.client();
  const std::vector<uint32_t> ids = {2};
  client.fetch_start(t.l0, ids);
  CHECK_THROWS_WITH_AS(client.fetch_start(t.l0, ids), doctest::Contains("is unanswered"), Error);
  auto hs = client.fetch_finish();
  check_records(t.c, client, t.l0, ids, hs);
  client.release(hs);
  CHECK_THROWS_WITH_AS(client.fetch_finish(), doctest::Contains("without a fetch_start"), Error);
}

TEST_CASE("IodExperts: a layer ended before its first next_ready gives back the pins of its fetch") {
  // Every slot of a 4-slot cache pinned by a fetch whose answer was never taken (the layer failed
  // between fetch_layer and next_ready): end_layer takes the answer and releases them, or another
  // client's fetch of 4 other experts would wait for ever (here: beyond its 3 s deadline).
  TinyIod t(4);
  {
    IodExperts src(t.c, t.iod.socket_path());
    src.fetch_layer(int(t.l0), std::vector<int>{0, 1, 2, 3});
    src.end_layer();
    ipc::ExpertStoreClient other(t.iod.socket_path(), t.c.container_id(), ipc::kDefaultHintCapacity, 3000);
    const std::vector<uint32_t> ex = {4, 5, 6, 7};
    auto hs = other.fetch(t.l0, ex);
    check_records(t.c, other, t.l0, ex, hs);
  }
  CHECK_EQ(t.iod.stop(), 0);
}

TEST_CASE("IodExperts: a hint names only experts not READY already; with none left no hint goes out") {
  // A 4-slot cache. The first MoE layer is not the last (synth_tiny), so a layer's pins wait
  // for the next message: the hint, or when no hint is sent, the next layer's fetch.
  TinyIod t(4);
  REQUIRE(t.c.expert_layers().size() >= 2);
  IodExperts src(t.c, t.iod.socket_path());
  const int l0 = int(t.l0);
  auto run_layer = [&](const std::vector<int>& want) {
    src.fetch_layer(l0, want);
    ExpertView v;
    size_t n = 0;
    while (src.next_ready(v) >= 0) ++n;
    CHECK_EQ(n, want.size());
    src.end_layer();
  };
  run_layer({1, 4});
  // Both READY in slots this client was given: no message.
  src.prefetch(l0, std::vector<int>{4, 1});
  CHECK_EQ(src.hints_skipped(), 1u);
  CHECK_EQ(src.hint_experts_resident(), 2u);
  CHECK_EQ(src.hint_stats().sent, 0u);
  // The pins of 1 and 4 ride on the next layer's fetch: another client then finds the three
  // slots it needs free (7 stays pinned until the next message). Without them it is refused.
  run_layer({7});
  CHECK_EQ(src.hint_stats().sent, 0u);  // no release went alone
  ipc::ExpertStoreClient other(t.iod.socket_path(), t.c.container_id(), ipc::kDefaultHintCapacity, 3000);
  const std::vector<uint32_t> ex = {0, 2, 3};
  auto hs = other.fetch(t.l0, ex);
  check_records(t.c, other, t.l0, ex, hs);
  // One of two READY: a hint naming only the other goes out (with 7's pin), and iod reads it.
  src.prefetch(l0, std::vector<int>{7, 9});
  CHECK_EQ(src.hints_skipped(), 1u);
  CHECK_EQ(src.hint_experts_resident(), 3u);
  CHECK_EQ(src.hint_stats().sent, 1u);
  auto s = src.client().stats();  // answered after the hint (same connection, in order)
  CHECK_EQ(s["prefetch"]["issued"].get<uint64_t>(), 1u);
  CHECK_EQ(src.client().hint_stats().failed, 0u);
  other.release(hs);
  CHECK_EQ(t.iod.stop(), 0);
}

namespace {

// The record a view points into (its gate section sits at the layout's gate offset).
const uint8_t* record_of(const Container& c, int layer, const ExpertView& v) {
  return v.gate - c.expert_layer(layer)->layout.gate_offset;
}

// One pass over every MoE layer asking for `want` in each; checks every view's bytes against
// the container's record. Returns the indices next_ready handed out, layer after layer.
std::vector<int> run_pass(const Container& c, ExpertSource& src, const std::vector<int>& want) {
  std::vector<int> handed;
  for (const ExpertLayerInfo& l : c.expert_layers()) {
    src.fetch_layer(l.layer, want);
    std::vector<uint8_t> rec(l.layout.stride);
    ExpertView v;
    for (int i; (i = src.next_ready(v)) >= 0;) {
      handed.push_back(i);
      c.read_record(l.layer, uint32_t(want[size_t(i)]), rec.data());
      CHECK(std::memcmp(record_of(c, l.layer, v), rec.data(), rec.size()) == 0);
    }
    src.end_layer();
  }
  return handed;
}

}  // namespace

TEST_CASE("IodExperts: a layer READY in slots it was given is read unpinned; its uses reach iod in one touch of up to kTouchPasses passes") {
  TinyIod t(16);
  const auto& layers = t.c.expert_layers();
  const uint64_t L = layers.size();
  REQUIRE(L >= 2);
  IodExperts src(t.c, t.iod.socket_path());
  src.set_touch_delay(std::chrono::hours(1));  // sends depend on passes alone (the time bound below)
  const std::vector<int> want = {1, 4, 6};
  run_pass(t.c, src, want);  // cold: every layer fetched
  CHECK_EQ(src.unpinned_layers(), 0u);
  auto s0 = src.client().stats();
  CHECK_EQ(s0["misses"].get<uint64_t>(), 3 * L);
  CHECK_EQ(s0["hits"].get<uint64_t>(), 0u);

  const std::string trace = t.tmp / "touch.jsonl";
  src.client().trace_start(trace);
  const uint64_t sent = src.hint_stats().sent;
  const uint64_t answers = src.client().answers();
  run_pass(t.c, src, want);
  // No call at all: no fetch, and the uses wait for more passes.
  CHECK_EQ(src.unpinned_layers(), L);
  CHECK_EQ(src.unpinned_refetched(), 0u);
  CHECK_EQ(src.hint_stats().sent, sent);
  CHECK_EQ(src.client().answers(), answers);
  CHECK_EQ(src.uses_touched(), 0u);
  // A stats call sends them first: they are counted as the fetches would have been.
  const ExpertSourceStats s1 = src.stats();
  CHECK_EQ(src.hint_stats().sent, sent + 1);
  CHECK_EQ(src.uses_touched(), 3 * L);
  CHECK_EQ(s1.hits, 3 * L);
  CHECK_EQ(s1.misses, 3 * L);
  CHECK_EQ(src.hint_stats().failed, 0u);

  // kTouchPasses passes go in one touch, sent at the last one's end, not before.
  for (uint32_t p = 1; p < ipc::kTouchPasses; ++p) run_pass(t.c, src, want);
  CHECK_EQ(src.hint_stats().sent, sent + 1);
  run_pass(t.c, src, want);
  CHECK_EQ(src.hint_stats().sent, sent + 2);
  CHECK_EQ(src.uses_touched(), 3 * L * (1 + ipc::kTouchPasses));
  CHECK_EQ(src.stats().hits, 3 * L * (1 + ipc::kTouchPasses));  // nothing pending: no touch
  CHECK_EQ(src.hint_stats().sent, sent + 2);
  CHECK_EQ(src.hint_stats().failed, 0u);
  const uint64_t lines = L * (1 + ipc::kTouchPasses);
  CHECK_EQ(src.client().trace_stop(), lines);
  // The trace names the uses layer after layer, pass after pass, as "touch".
  {
    std::ifstream in(trace);
    std::string line;
    size_t k = 0;
    for (; std::getline(in, line); ++k) {
      REQUIRE_LT(k, lines);
      auto j = nlohmann::json::parse(line);
      CHECK_EQ(j["op"], "touch");
      CHECK_EQ(j["layer"].get<int>(), layers[k % L].layer);
      CHECK(j["experts"].get<std::vector<int>>() == want);
    }
    CHECK_EQ(k, lines);
  }

  // The same layer's batches stay apart (a model with one MoE layer: a pass each), and go ahead
  // of a fetch: here three batches of the first layer, then a layer naming an expert not READY.
  const std::string trace2 = t.tmp / "touch2.jsonl";
  src.client().trace_start(trace2);
  for (int b = 0; b < 3; ++b) {
    src.fetch_layer(layers[0].layer, want);
    ExpertView v;
    while (src.next_ready(v) >= 0) {
    }
    src.end_layer();
  }
  CHECK_EQ(src.hint_stats().sent, sent + 2);
  src.fetch_layer(layers[0].layer, std::vector<int>{1, 9});
  CHECK_EQ(src.hint_stats().sent, sent + 3);
  CHECK(src.client().fetch_pending());
  ExpertView v;
  while (src.next_ready(v) >= 0) {
  }
  src.end_layer();
  CHECK_EQ(src.unpinned_layers(), L * (1 + ipc::kTouchPasses) + 3);
  CHECK_EQ(src.client().trace_stop(), 4u);  // three touch entries, then the fetch
  {
    std::ifstream in(trace2);
    std::string line;
    std::vector<std::string> ops;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      ops.push_back(j["op"].get<std::string>());
      CHECK_EQ(j["layer"].get<int>(), layers[0].layer);
    }
    CHECK(ops == std::vector<std::string>{"touch", "touch", "touch", "fetch"});
  }

  // The time bound: with no delay the uses go at every pass's end.
  src.set_touch_delay(std::chrono::milliseconds(0));
  src.flush_releases();  // the fetched layer's pins, sent now: the one-way count below is the touch's
  const uint64_t touched = src.uses_touched(), sent_before = src.hint_stats().sent;
  run_pass(t.c, src, want);
  CHECK_EQ(src.hint_stats().sent, sent_before + 1);
  CHECK_EQ(src.uses_touched(), touched + 3 * L);

  // Off: every layer fetched and pinned.
  src.set_unpinned_reads(false);
  const uint64_t unpinned = src.unpinned_layers();
  run_pass(t.c, src, want);
  CHECK_EQ(src.unpinned_layers(), unpinned);

  // iod checks a touch's keys like a fetch's: a bad one is refused by name (counted by the
  // client like a failed hint, never thrown).
  REQUIRE(src.client().touch_async(std::vector<ipc::LayerUse>{{999, {0}}}));
  src.client().stats();
  CHECK_EQ(src.hint_stats().failed, 1u);
  CHECK(src.hint_stats().last_error.find("not a MoE layer") != std::string::npos);
  // An entry naming no expert, and more entries than kTouchPasses passes have layers, are
  // refused whole; exactly that many are taken.
  uint64_t hits = src.client().stats()["hits"].get<uint64_t>();
  CHECK_THROWS_WITH_AS(src.client().touch(std::vector<ipc::LayerUse>{{t.l0, {1}}, {uint32_t(layers[1].layer), {}}}),
                       doctest::Contains("names no expert"), Error);
  std::vector<ipc::LayerUse> most(L * ipc::kTouchPasses, ipc::LayerUse{t.l0, {1}});
  std::vector<ipc::LayerUse> too_many(most.size() + 1, ipc::LayerUse{t.l0, {1}});
  CHECK_THROWS_WITH_AS(src.client().touch(too_many), doctest::Contains("at most 16 passes of one per layer"), Error);
  CHECK_EQ(src.client().stats()["hits"].get<uint64_t>(), hits);  // nothing of them counted
  src.client().touch(most);
  CHECK_EQ(src.client().stats()["hits"].get<uint64_t>(), hits + most.size());
  CHECK_EQ(t.iod.stop(), 0);
}

TEST_CASE("IodExperts: records another client brought in are known READY from the slot table at attach") {
  TinyIod t(16);
  {
    ipc::ExpertStoreClient other(t.iod.socket_path(), t.c.container_id());
    const std::vector<uint32_t> ex = {2, 3};
    auto hs = other.fetch(t.l0, ex);
    check_records(t.c, other, t.l0, ex, hs);
    other.release(hs);
  }
  IodExperts src(t.c, t.iod.socket_path());
  src.fetch_layer(int(t.l0), std::vector<int>{2, 3});
  CHECK_EQ(src.unpinned_layers(), 1u);  // no fetch: this client never asked for them
  CHECK_FALSE(src.client().fetch_pending());
  ExpertView v;
  std::vector<uint8_t> rec(t.c.expert_layer(int(t.l0))->layout.stride);
  size_t n = 0;
  for (int i; (i = src.next_ready(v)) >= 0; ++n) {
    t.c.read_record(int(t.l0), uint32_t(2 + i), rec.data());
    CHECK(std::memcmp(record_of(t.c, int(t.l0), v), rec.data(), rec.size()) == 0);
  }
  CHECK_EQ(n, 2u);
  src.end_layer();
  CHECK_EQ(t.iod.stop(), 0);
}

TEST_CASE("IodExperts: an unpinned read whose slot was reused is fetched again and handed out under the same index") {
  // 4 slots. Experts 1 and 4 of the first MoE layer are READY and unpinned; while the model
  // holds the view of the first, another client's fetch of 4 other experts takes both slots.
  TinyIod t(4);
  const int l0 = int(t.l0);
  const std::vector<int> want = {1, 4};
  IodExperts src(t.c, t.iod.socket_path());
  auto one_layer = [&] {
    src.fetch_layer(l0, want);
    ExpertView v;
    while (src.next_ready(v) >= 0) {
    }
    src.end_layer();
    src.flush_releases();  // the first MoE layer is not the last: its pins would wait for the next message
  };
  one_layer();
  // Another client's fetch of 4 other experts: it takes both slots (they are unpinned).
  auto take_both_slots = [&] {
    ipc::ExpertStoreClient other(t.iod.socket_path(), t.c.container_id());
    const std::vector<uint32_t> ex = {0, 2, 3, 5};
    auto hs = other.fetch(t.l0, ex);
    check_records(t.c, other, t.l0, ex, hs);
    other.release(hs);
  };
  // The indices handed out from here to the layer's end (sorted), each view's bytes checked.
  std::vector<uint8_t> rec(t.c.expert_layer(l0)->layout.stride);
  ExpertView v;
  auto rest_of_layer = [&] {
    std::vector<int> handed;
    for (int i; (i = src.next_ready(v)) >= 0;) {
      handed.push_back(i);
      t.c.read_record(l0, uint32_t(want[size_t(i)]), rec.data());
      CHECK(std::memcmp(record_of(t.c, l0, v), rec.data(), rec.size()) == 0);
    }
    src.end_layer();
    std::sort(handed.begin(), handed.end());
    return handed;
  };

  src.fetch_layer(l0, want);
  CHECK_EQ(src.unpinned_layers(), 1u);
  CHECK_FALSE(src.client().fetch_pending());
  REQUIRE(src.next_ready(v) >= 0);
  take_both_slots();
  // The view given is torn: the same index comes again, now pinned and intact, then the other.
  CHECK(rest_of_layer() == std::vector<int>{0, 1});
  CHECK_EQ(src.unpinned_refetched(), 2u);
  CHECK_EQ(src.uses_touched(), 0u);
  auto s = src.client().stats();
  CHECK_EQ(s["misses"].get<uint64_t>(), 2u + 4u + 2u);  // read again, into the slots the other client left
  src.flush_releases();

  // Reused before its turn: the slots turn over between fetch_layer and the first next_ready,
  // so nothing is handed out unpinned; both are fetched.
  src.fetch_layer(l0, want);
  CHECK_EQ(src.unpinned_layers(), 2u);
  take_both_slots();
  CHECK(rest_of_layer() == std::vector<int>{0, 1});
  CHECK_EQ(src.unpinned_refetched(), 4u);
  CHECK_EQ(t.iod.stop(), 0);
}

TEST_CASE("IodExperts: experts handed out several at once stay intact together; torn ones come again") {
  // The model applies a prefill chunk's experts side by side (next_ready_group). 4 slots,
  // experts 1 and 4 of the first MoE layer.
  TinyIod t(4);
  const int l0 = int(t.l0);
  const std::vector<int> want = {1, 4};
  IodExperts src(t.c, t.iod.socket_path());
  std::vector<uint8_t> rec(t.c.expert_layer(l0)->layout.stride);
  // Every view of a group checked after the call that gave it (all valid at once); returns the
  // group sizes of the layer and the indices handed out.
  auto layer_in_groups = [&](std::vector<int>& handed) {
    std::vector<size_t> sizes;
    std::array<ExpertSource::Ready, 4> out;
    for (size_t k; (k = src.next_ready_group(out)) > 0;) {
      sizes.push_back(k);
      for (size_t j = 0; j < k; ++j) {
        handed.push_back(out[j].index);
        t.c.read_record(l0, uint32_t(want[size_t(out[j].index)]), rec.data());
        CHECK(std::memcmp(record_of(t.c, l0, out[j].view), rec.data(), rec.size()) == 0);
      }
    }
    src.end_layer();
    src.flush_releases();
    return sizes;
  };
  std::vector<int> handed;
  // Pinned, cold: the first is waited for; all are handed out once.
  src.set_unpinned_reads(false);
  src.fetch_layer(l0, want);
  layer_in_groups(handed);
  std::sort(handed.begin(), handed.end());
  CHECK(handed == std::vector<int>{0, 1});
  // Pinned, warm: both READY, one group.
  handed.clear();
  src.fetch_layer(l0, want);
  CHECK(layer_in_groups(handed) == std::vector<size_t>{2});
  // Unpinned, warm: one group, no fetch.
  src.set_unpinned_reads(true);
  handed.clear();
  src.fetch_layer(l0, want);
  CHECK_EQ(src.unpinned_layers(), 1u);
  CHECK(layer_in_groups(handed) == std::vector<size_t>{2});
  CHECK_EQ(src.unpinned_refetched(), 0u);
  // Unpinned, and another client takes both slots while the model holds the group: both are
  // torn, fetched pinned and handed out again under their indices, intact.
  handed.clear();
  src.fetch_layer(l0, want);
  CHECK_EQ(src.unpinned_layers(), 2u);
  std::array<ExpertSource::Ready, 4> out;
  REQUIRE_EQ(src.next_ready_group(out), 2u);
  CHECK_EQ(src.uses_touched(), 0u);  // the batch before's uses wait (no pass ended, no fetch)
  {
    ipc::ExpertStoreClient other(t.iod.socket_path(), t.c.container_id());
    const std::vector<uint32_t> ex = {0, 2, 3, 5};
    auto hs = other.fetch(t.l0, ex);
    check_records(t.c, other, t.l0, ex, hs);
    other.release(hs);
  }
  layer_in_groups(handed);
  std::sort(handed.begin(), handed.end());
  CHECK(handed == std::vector<int>{0, 1});
  CHECK_EQ(src.unpinned_refetched(), 2u);
  // The batch before's 2 uses went ahead of the fetch; a torn read is no use (the fetch counted
  // them).
  CHECK_EQ(src.uses_touched(), 2u);
  CHECK_EQ(t.iod.stop(), 0);
}

TEST_CASE("iod: a hint carries the releases of the layer before it, unpinned before its reads") {
  // Every slot of a 4-slot cache pinned by one fetch; the hint that gives them back may read into
  // them at once: 2 prefetch reads issued. Without the releases it could issue none.
  TinyIod t(4);
  ipc::ExpertStoreClient client(t.iod.socket_path(), t.c.container_id());
  const std::vector<uint32_t> ex = {0, 1, 2, 3};
  auto hs = client.fetch(t.l0, ex);
  check_records(t.c, client, t.l0, ex, hs);
  REQUIRE(client.prefetch_async(t.l0, std::vector<uint32_t>{4, 5}, hs));
  auto s = client.stats();  // answered after the hint (same connection, in order)
  CHECK_EQ(s["prefetch"]["issued"].get<uint64_t>(), 2u);
  CHECK_EQ(client.hint_stats().failed, 0u);
  // The released handles are no longer ours: releasing them again is refused by name.
  CHECK_THROWS_WITH_AS(client.release(hs), doctest::Contains("not pinned by this connection"), Error);
  CHECK_EQ(t.iod.stop(), 0);
}

TEST_CASE("iod: one-way calls beyond the bound are dropped and counted while iod does not answer") {
  TinyIod t(16);
  const uint32_t l0 = t.l0;
  PrivateIod& iod = t.iod;
  ipc::ExpertStoreClient client(iod.socket_path(), t.c.container_id(), 3);
  std::vector<uint32_t> one = {1};
  auto held = client.fetch(l0, one);
  client.wait(held[0]);
  // A stopped iod answers nothing: three hints fill the bound, the next calls are not sent.
  ScopedStop stop(iod.pid());  // resumed on every exit path, or iod's SIGTERM at the end would wait forever
  REQUIRE(stop.stopped());
  CHECK(client.prefetch_async(l0, std::vector<uint32_t>{2}));
  CHECK(client.prefetch_async(l0, std::vector<uint32_t>{3}));
  CHECK(client.prefetch_async(l0, std::vector<uint32_t>{4}));
  CHECK_FALSE(client.prefetch_async(l0, std::vector<uint32_t>{5}));
  CHECK_FALSE(client.prefetch_async(l0, std::vector<uint32_t>{6}));
  CHECK_FALSE(client.release_async(held));  // the caller keeps the handle
  {
    const ipc::HintStats& h = client.hint_stats();
    CHECK_EQ(h.sent, 3u);
    CHECK_EQ(h.dropped, 2u);
    CHECK_EQ(h.outstanding, 3u);
    CHECK_EQ(h.failed, 0u);
  }
  REQUIRE(stop.resume());
  // The next call on the connection takes the three answers; the bound is free again.
  client.release(held);
  const ipc::HintStats& h = client.hint_stats();
  CHECK_EQ(h.outstanding, 0u);
  CHECK(client.prefetch_async(l0, std::vector<uint32_t>{7}));
  auto s = client.stats();
  CHECK_EQ(s["prefetch"]["issued"].get<uint64_t>(), 4u);  // 2, 3, 4 and 7; never 5 or 6
  CHECK_EQ(h.sent, 4u);
  CHECK_EQ(h.dropped, 2u);
  CHECK_EQ(iod.stop(), 0);
}

TEST_CASE("iod: usage counts are saved at SIGTERM and pre-warm the next start") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  const auto& layers = c.expert_layers();
  const uint32_t l0 = uint32_t(layers[0].layer), l1 = uint32_t(layers[1].layer);
  const std::string usage = model + "/usage";
  REQUIRE_FALSE(std::filesystem::exists(usage));
  std::vector<uint32_t> hot0 = {3, 9}, hot1 = {4};
  {
    PrivateIod iod(iod_args(model, 16), tmp / "run");
    ipc::ExpertStoreClient client(iod.socket_path(), c.container_id());
    std::vector<ipc::SlotHandle> held;
    for (int t = 0; t < 3; ++t) {  // three "tokens" over the first two MoE layers
      held = client.fetch(l0, hot0, held);
      held = client.fetch(l1, hot1, held);
    }
    client.release(held);
    CHECK_EQ(iod.stop(), 0);
  }
  REQUIRE(std::filesystem::exists(usage));
  cache::UsageCounts u = cache::read_usage_file(usage);
  CHECK_EQ(u.container_id, c.container_id());
  CHECK_EQ(u.tokens, 3u);
  auto count = [&](uint32_t layer, uint32_t e) {
    size_t li = size_t(std::find(u.layers.begin(), u.layers.end(), layer) - u.layers.begin());
    REQUIRE(li < u.layers.size());
    return u.counts[li * u.experts + e];
  };
  CHECK_EQ(count(l0, 3), 3u);
  CHECK_EQ(count(l0, 9), 3u);
  CHECK_EQ(count(l1, 4), 3u);
  CHECK_EQ(count(l0, 4), 0u);

  // The next start pre-warms exactly those three records: fetching them reads nothing more.
  PrivateIod iod(iod_args(model, 16), tmp / "run");
  ipc::ExpertStoreClient client(iod.socket_path(), c.container_id());
  auto s = wait_stats(client, [](const nlohmann::json& s) {
    return s["slots_occupied"].get<uint32_t>() == 3 && s["in_flight"].get<uint32_t>() == 0;
  });
  CHECK_EQ(s["slots_occupied"].get<uint32_t>(), 3u);
  const uint64_t prewarm_bytes = s["bytes_read"].get<uint64_t>();
  CHECK_EQ(prewarm_bytes, 2 * layers[0].layout.stride + layers[1].layout.stride);
  auto hs = client.fetch(l0, hot0);
  check_records(c, client, l0, hot0, hs);
  auto hs1 = client.fetch(l1, hot1, hs);
  check_records(c, client, l1, hot1, hs1);
  s = client.stats();
  CHECK_EQ(s["hits"].get<uint64_t>(), 3u);
  CHECK_EQ(s["misses"].get<uint64_t>(), 0u);
  CHECK_EQ(s["bytes_read"].get<uint64_t>(), prewarm_bytes);
}

TEST_CASE("waste iobench replays a trace through a private iod and refuses a trace too big") {
  TempDir tmp;
  std::string model = synth_tiny(tmp);
  Container c = Container::open(model);
  const uint32_t L = uint32_t(c.expert_layers().size());
  // A small routing trace of the container's shape: 20 tokens, top-4 of 32 experts.
  std::string trace = tmp / "trace.jsonl";
  {
    std::ofstream f(trace);
    for (int t = 0; t < 20; ++t) {
      nlohmann::json layers = nlohmann::json::array();
      for (uint32_t l = 0; l < L; ++l) {
        std::vector<uint32_t> ex;
        for (uint32_t k = 0; k < 4; ++k) ex.push_back((uint32_t(t) * 3 + l * 5 + k * 7) % 32);
        layers.push_back(ex);
      }
      f << nlohmann::json{{"tok", t}, {"layers", layers}}.dump() << "\n";
    }
  }
  uint64_t hits_default_io = 0;
  for (std::string io : {"uring", "pread"}) {
    CAPTURE(io);
    auto r = run_command(waste_bin() + " iobench " + model + " --trace " + trace + " --qd 4 --io " + io +
                         " --json --no-raw");
    INFO(r.output);
    if (io == "uring" && !iod::kHaveUring) {
      // Refused by name, not served by the pread pool behind the user's back.
      CHECK_NE(r.status, 0);
      CHECK(r.output.find("built without io_uring") != std::string::npos);
      waste::test::skip_part("built without io_uring: iobench --io uring");
      continue;
    }
    REQUIRE_EQ(r.status, 0);
    auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    CHECK_EQ(j["tokens"].get<size_t>(), 20u);
    CHECK_EQ(j["hits"].get<uint64_t>() + j["misses"].get<uint64_t>(), 20u * L * 4);
    CHECK_GT(j["bytes_read"].get<uint64_t>(), 0u);
    CHECK_EQ(j["iod"]["failures"].get<uint64_t>(), 0u);
    if (io == iod::kDefaultIo) hits_default_io = j["hits"].get<uint64_t>();
  }
  // Round trip: iod's own request trace of that replay (--trace) replays the same requests.
  // Same cache (one working set), same policy, same (default) --io: the same hits as the
  // routing trace's replay.
  {
    std::string requests = tmp / "requests.jsonl";
    std::vector<std::string> args = iod_args(model, L * 4);
    args.insert(args.end(), {"--trace", requests});
    {
      PrivateIod iod(args, tmp / "traced");
      auto r = run_command(waste_bin() + " iobench " + model + " --trace " + trace + " --run-dir " + (tmp / "traced") +
                           " --json --no-raw");
      INFO(r.output);
      REQUIRE_EQ(r.status, 0);
      CHECK_EQ(iod.stop(), 0);
    }
    auto r = run_command(waste_bin() + " iobench " + model + " --trace " + requests + " --qd 4 --json --no-raw");
    INFO(r.output);
    REQUIRE_EQ(r.status, 0);
    auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    CHECK_EQ(j["tokens"].get<size_t>(), 20u);
    CHECK_EQ(j["top_k"].get<uint32_t>(), 4u);
    CHECK_EQ(j["hits"].get<uint64_t>(), hits_default_io);
    CHECK_EQ(j["hits"].get<uint64_t>() + j["misses"].get<uint64_t>(), 20u * L * 4);
  }
  auto r = run_command(waste_bin() + " iobench " + model + " --trace " + shared_dir() +
                       "/traces/kimi-linear-300.jsonl --json --no-raw");
  CHECK_NE(r.status, 0);
  CHECK(r.output.find("MoE layers") != std::string::npos);
}

TEST_CASE("iod and waste plan: one planner, the same slots for the same model, budget, context and sessions") {
  TempDir tmp;
  const std::string model = synth_tiny(tmp);
  const Container c = Container::open(model);
  uint64_t records = 0;
  for (const auto& l : c.expert_layers()) records += l.expert_count;
  struct Shape {
    uint64_t ctx;
    uint32_t sessions;
    std::string prompt_cache;
    bool http = false;  // waste plan --http, waste-iod --http-front-end (waste up --http passes it)
    uint32_t threads = 0;  // compute's --threads, given to both (0: neither is told: this machine's)
  };
  int run = 0;
  for (const Shape& shape : {Shape{4096, 1, "auto"}, Shape{512, 1, "auto"}, Shape{16384, 2, "auto"}, Shape{2048, 3, "8M"},
                             Shape{4096, 1, "auto", true}, Shape{4096, 1, "auto", false, 24}}) {
    const std::string threads = shape.threads ? " --threads " + std::to_string(shape.threads) : std::string();
    const std::string args = " --ctx " + std::to_string(shape.ctx) + " --sessions " + std::to_string(shape.sessions) +
                             " --prompt-cache " + shape.prompt_cache + (shape.http ? " --http" : "") + threads;
    const std::string iod_http = shape.http ? " --http-front-end" : "";
    auto floor_plan = run_command(waste_bin() + " plan --json" + args + " " + model);
    INFO(floor_plan.output);
    REQUIRE_EQ(floor_plan.status, 0);
    const auto fj = nlohmann::json::parse(floor_plan.output);
    const uint64_t floor = fj["floor_bytes"].get<uint64_t>(), stride = fj["record_stride"].get<uint64_t>();
    if (shape.http) {
      // waste-serve's own memory is counted only where it runs: the same plan without --http
      // has exactly its base less scratch.
      auto bare = run_command(waste_bin() + " plan --json --ctx " + std::to_string(shape.ctx) + " --sessions " +
                              std::to_string(shape.sessions) + " --prompt-cache " + shape.prompt_cache + " " + model);
      REQUIRE_EQ(bare.status, 0);
      const auto bj = nlohmann::json::parse(bare.output);
      CHECK_EQ(fj["scratch_bytes"].get<uint64_t>() - bj["scratch_bytes"].get<uint64_t>(), plan::kHttpFrontEndBaseBytes);
      CHECK(fj["http_front_end"].get<bool>());
      CHECK_FALSE(bj["http_front_end"].get<bool>());
    }
    // A budget between whole slots, so that both must round the same way.
    const uint64_t budget = floor + 7 * stride + stride / 2;
    auto plan = run_command(waste_bin() + " plan --json --budget " + std::to_string(budget) + args + " " + model);
    REQUIRE_EQ(plan.status, 0);
    const uint64_t planned = nlohmann::json::parse(plan.output)["slots"].get<uint64_t>();
    CHECK_EQ(planned, uint64_t(c.config().top_k) + 7);
    const std::string sessions = std::to_string(shape.sessions);
    std::vector<std::string> iod_args = {"--model", model, "--budget", std::to_string(budget), "--ctx",
                                         std::to_string(shape.ctx), "--sessions", sessions, "--prompt-cache", shape.prompt_cache};
    if (shape.http) iod_args.push_back("--http-front-end");
    if (shape.threads) {
      iod_args.push_back("--threads");
      iod_args.push_back(std::to_string(shape.threads));
      // Each compute thread's expert buffers count: more threads, a higher floor.
      auto fewer = run_command(waste_bin() + " plan --json --ctx " + std::to_string(shape.ctx) + " --threads 1 " + model);
      REQUIRE_EQ(fewer.status, 0);
      CHECK_GT(floor, nlohmann::json::parse(fewer.output)["floor_bytes"].get<uint64_t>());
      CHECK_EQ(fj["threads"].get<uint32_t>(), shape.threads);
    }
    PrivateIod iod(iod_args, tmp / ("run" + std::to_string(run++)));
    ipc::ExpertStoreClient client(iod.socket_path());
    CHECK_EQ(uint64_t(client.info().layout.slot_count), std::min(planned, records));
    // One byte under the floor: the planner refuses it, and so does iod.
    auto under = run_command(waste_bin() + " plan --budget " + std::to_string(floor - 1) + args + " " + model);
    CHECK_NE(under.status, 0);
    auto iod_under = run_command(iobench::find_iod_binary() + " --model " + model + " --run-dir " + (tmp / "under") +
                                 " --budget " + std::to_string(floor - 1) + " --ctx " + std::to_string(shape.ctx) +
                                 " --sessions " + sessions + " --prompt-cache " + shape.prompt_cache + iod_http + threads);
    CHECK_NE(iod_under.status, 0);
    CHECK_NE(iod_under.output.find("under the floor"), std::string::npos);
  }
}
