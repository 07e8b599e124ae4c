// One definition of each statistic (shared/stats/): after a run, the Engine reply (Cap'n Proto,
// read here through the dynamic API, not libwaste), `waste status --json` and waste-serve's
// /metrics report the same value for every statistic the lists define; waste-serve's own
// statistics are its metrics; and `waste bench --json` reports the expert counters under the
// names `waste status --json` gives them, with the values iod counted for it.
#include <doctest/doctest.h>

#include <capnp/dynamic.h>
#include <capnp/ez-rpc.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "proto/engine.capnp.h"
#include "shared/ipc/expert_store_client.h"
#include "shared/stats/engine_stats.h"
#include "shared/stats/serve_stats.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_engine_instance.h"

using namespace waste::test;
using nlohmann::json;
namespace stats = waste::stats;

namespace {

// Every statistic of S in a struct reader, by its field name, as a double (as /metrics has it).
template <class S>
std::map<std::string, double> values_of(capnp::DynamicStruct::Reader r) {
  std::map<std::string, double> out;
  stats::describe<S>([&](const stats::Stat& st) {
    out[std::string(st.name)] = r.get(kj::StringPtr(std::string(st.field).c_str())).as<double>();
  });
  return out;
}

struct EngineReply {
  std::map<std::string, double> engine, prompt_cache;
};

EngineReply engine_reply(const std::string& run_dir) {
  capnp::EzRpcClient rpc("unix:" + run_dir + "/compute.sock");
  auto r = rpc.getMain<waste::proto::Engine>().statsRequest().send().wait(rpc.getWaitScope());
  return {values_of<stats::EngineStats>(capnp::toDynamic(r.getStats())),
          values_of<stats::PromptCacheStats>(capnp::toDynamic(r.getStats().getPromptCache()))};
}

// The reply, the JSON and the text agree on every statistic of S (uptime, which runs on
// between the three, only in order).
template <class S>
void check_agree(const std::map<std::string, double>& reply, const std::map<std::string, double>& reply_after,
                 const json& status, const std::string& metrics) {
  stats::describe<S>([&](const stats::Stat& st) {
    const std::string name(st.name);
    const json::json_pointer at{std::string(st.json)};
    REQUIRE_MESSAGE(status.contains(at), name, " missing in waste status --json");
    const double from_status = status[at].get<double>();
    double from_metrics = -1;
    if (!st.metric.empty()) {
      REQUIRE_MESSAGE(metrics.find("\n" + std::string(st.metric) + " ") != std::string::npos, st.metric);
      from_metrics = metric(metrics, std::string(st.metric));
    }
    if (name == "uptime_seconds") {
      CHECK(reply.at(name) <= from_status);
      CHECK(from_status <= from_metrics);
      CHECK(from_metrics <= reply_after.at(name));
      return;
    }
    CHECK_MESSAGE(from_status == reply.at(name), name);
    if (!st.metric.empty()) CHECK_MESSAGE(from_metrics == reply.at(name) / st.divisor, st.metric);
  });
}

bool same_but_uptime(std::map<std::string, double> a, std::map<std::string, double> b) {
  a.erase("uptime_seconds");
  b.erase("uptime_seconds");
  return a == b;
}

}  // namespace

TEST_CASE("stats: /metrics, waste status --json and the Engine reply report the same values after a run") {
  const std::string base = free_loopback_address();
  Instance inst("--http " + base + " --ctx 256");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  TempDir tmp;
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}, {"max_tokens", 8}};
  const Http reply = curl(base + "/v1/chat/completions", tmp.path(), chat.dump());
  REQUIRE_MESSAGE(reply.status == 200, reply.body);

  // The three are read one after the other; a reply before and after shows nothing moved in
  // between (a session closing late, say), else they are read again.
  for (int attempt = 0;; ++attempt) {
    const EngineReply before = engine_reply(inst.run_dir());
    const auto st = run_command(waste_bin() + " status --json --run-dir " + inst.run_dir());
    REQUIRE_MESSAGE(st.status == 0, st.output);
    const json status = json::parse(st.output, nullptr, false);
    REQUIRE_MESSAGE(status.is_object(), st.output);
    REQUIRE_MESSAGE(status.contains("engine"), st.output);
    const Http m = curl(base + "/metrics", tmp.path());
    REQUIRE(m.status == 200);
    const EngineReply after = engine_reply(inst.run_dir());
    if (!(same_but_uptime(before.engine, after.engine) && before.prompt_cache == after.prompt_cache) && attempt < 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    CHECK(before.engine.at("tokens") >= 8);
    CHECK(before.engine.at("requests") >= 1);
    CHECK(before.engine.at("misses") > 0);
    CHECK(before.engine.at("prefetch_issued") > 0);  // the counters the hand-written copies dropped
    check_agree<stats::EngineStats>(before.engine, after.engine, status["engine"], m.body);
    check_agree<stats::PromptCacheStats>(before.prompt_cache, after.prompt_cache, status["engine"]["prompt_cache"],
                                         m.body);
    // waste-serve's own statistics (its list) are all there, each with its type.
    stats::describe<stats::ServeStats>([&](const stats::Stat& st) {
      const std::string type = st.kind == stats::Kind::Counter ? "counter" : "gauge";
      CHECK_MESSAGE(m.body.find("# TYPE " + std::string(st.metric) + " " + type + "\n") != std::string::npos, st.metric);
      CHECK_MESSAGE(metric(m.body, std::string(st.metric)) >= 0, st.metric);
    });
    break;
  }

  // `waste bench --json` on this instance's iod. Its counters are what iod counted between two
  // snapshots around its timed decode; with no warm-up (--warmup 0) and no lookahead (whose
  // hints can leave reads in flight past the bench's last snapshot), that is everything the
  // bench asked of iod, and nobody else asks anything meanwhile (compute is idle).
  waste::ipc::ExpertStoreClient iod(inst.run_dir() + "/iod.sock");
  const json iod_before = iod.stats();
  const auto b = run_command(waste_bin() + " bench " + inst.model() + " --run-dir " + inst.run_dir() +
                             " -n 4 --warmup 0 --lookahead 0 --json --no-progress");
  REQUIRE_MESSAGE(b.status == 0, b.output);
  const size_t open = b.output.find('{');
  REQUIRE_MESSAGE(open != std::string::npos, b.output);
  const json bench = json::parse(b.output.substr(open), nullptr, false);
  REQUIRE_MESSAGE(bench.is_object(), b.output);
  const json iod_after = iod.stats();
  CHECK(bench["misses"].get<double>() + bench["hits"].get<double>() > 0);
  stats::describe<stats::ExpertSourceStats>([&](const stats::Stat& st) {
    const json::json_pointer at{std::string(st.json)};
    REQUIRE_MESSAGE(bench.contains(at), st.json, " missing in waste bench --json");
    REQUIRE_MESSAGE(iod_after.contains(at), st.json, " missing in iod's stats");
    CHECK_MESSAGE(bench[at].get<double>() == iod_after[at].get<double>() - iod_before[at].get<double>(), st.name);
  });
}
