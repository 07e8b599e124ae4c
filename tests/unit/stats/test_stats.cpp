// The statistics lists (shared/stats/): every listed statistic has its Cap'n Proto field and
// every field of the schemas is listed (or named here as not a statistic), so that none is
// dropped on the way; and what is derived from the lists: arithmetic, JSON, Prometheus text.
#include <doctest/doctest.h>

#include <capnp/message.h>
#include <capnp/schema.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "proto/engine.capnp.h"
#include "proto/expert_store.capnp.h"
#include "shared/stats/arithmetic.h"
#include "shared/stats/capnp.h"
#include "shared/stats/engine_stats.h"
#include "shared/stats/generate_stats.h"
#include "shared/stats/json.h"
#include "shared/stats/prometheus.h"
#include "shared/stats/serve_stats.h"
#include "shared/stats/store_stats.h"

namespace stats = waste::stats;

namespace {

std::set<std::string> fields_of(capnp::StructSchema schema) {
  std::set<std::string> out;
  for (auto f : schema.getFields()) out.insert(f.getProto().getName().cStr());
  return out;
}

template <class S>
std::set<std::string> listed_fields() {
  std::set<std::string> out;
  stats::describe<S>([&](const stats::Stat& st) { out.insert(std::string(st.field)); });
  return out;
}

// What keeps the schema's fields from being exactly the list's and `others` (what is not a
// number to count): one line per field missing on either side.
template <class S, class Proto>
std::vector<std::string> mismatches(const std::set<std::string>& others) {
  const std::set<std::string> schema = fields_of(capnp::Schema::from<Proto>());
  std::set<std::string> expected = listed_fields<S>();
  std::vector<std::string> out;
  for (const auto& o : others)
    if (!expected.insert(o).second) out.push_back(o + " is listed and also named as not a statistic");
  for (const auto& f : expected)
    if (!schema.count(f)) out.push_back("listed, but the schema has no field " + f);
  for (const auto& f : schema)
    if (!expected.count(f)) out.push_back("field " + f + " is in no statistics list");
  return out;
}

template <class S, class Proto>
void check_schema(const std::set<std::string>& others) {
  for (const auto& m : mismatches<S, Proto>(others)) FAIL_CHECK(m);
}

// Checked against LayerStats {layer, hits, misses}: a listed statistic with no field (ghost) and a
// field with no statistic (layer), what the check must catch.
#define WASTE_TEST_BROKEN_STATS(X, G)                                                                \
  X(uint64_t, hits, "hits", "/hits", Counter, "lookups", "", 1, "Hits.")                            \
  X(uint64_t, misses, "misses", "/misses", Counter, "lookups", "", 1, "Misses.")                    \
  X(uint64_t, ghost, "ghost", "/ghost", Counter, "lookups", "", 1, "In no schema.")
struct BrokenStats {
  WASTE_STATS(WASTE_TEST_BROKEN_STATS)
};

// Every statistic gets a distinct value (1, 2, 3, ...), so that a crossed wire shows.
template <class S>
S numbered() {
  S s;
  int n = 0;
  stats::each(s, [&](const stats::Stat&, auto& v) { v = ++n; });
  return s;
}

}  // namespace

TEST_CASE("stats: each list and its Cap'n Proto struct have the same fields") {
  check_schema<stats::StoreStats, waste::proto::Stats>({"ioPath", "policy", "layers"});
  check_schema<stats::EngineStats, waste::proto::EngineStats>({"expertPath", "promptCache"});
  check_schema<stats::PromptCacheStats, waste::proto::PromptCacheStats>({});
  check_schema<stats::SessionStats, waste::proto::SessionStats>({"id", "position", "context", "generating"});
  // A request's reply: its own statistics, the expert counters among them.
  check_schema<stats::GenerateStats, waste::proto::GenerateStats>({"stopReason"});
  const std::set<std::string> generate = fields_of(capnp::Schema::from<waste::proto::GenerateStats>());
  for (const auto& f : listed_fields<stats::ExpertSourceStats>()) CHECK_MESSAGE(generate.count(f) == 1, f);
  check_schema<stats::LayerCounters, waste::proto::LayerStats>({"layer"});
}

TEST_CASE("stats: the schema check names a statistic without a field and a field without a statistic") {
  const auto m = mismatches<BrokenStats, waste::proto::LayerStats>({});
  CHECK(m == std::vector<std::string>{"listed, but the schema has no field ghost", "field layer is in no statistics list"});
  const auto dropped = mismatches<stats::ExpertSourceStats, waste::proto::SessionStats>({"id", "position", "context",
                                                                                         "generating", "requests"});
  CHECK(std::find(dropped.begin(), dropped.end(), "field tokens is in no statistics list") != dropped.end());
}

TEST_CASE("stats: names are unique; counters' Prometheus names end in _total") {
  auto check = [](auto tag) {
    using S = decltype(tag);
    std::set<std::string> names, jsons, metrics;
    stats::describe<S>([&](const stats::Stat& st) {
      CHECK_MESSAGE(names.insert(std::string(st.name)).second, st.name);
      CHECK_MESSAGE(jsons.insert(std::string(st.json)).second, st.json);
      CHECK(!st.unit.empty());
      CHECK(!st.help.empty());
      CHECK(st.divisor > 0);
      if (st.metric.empty()) return;
      CHECK_MESSAGE(metrics.insert(std::string(st.metric)).second, st.metric);
      CHECK_MESSAGE((st.metric.rfind("waste_", 0) == 0), st.metric);
      const bool total = st.metric.size() > 6 && st.metric.substr(st.metric.size() - 6) == "_total";
      CHECK_MESSAGE(total == (st.kind == stats::Kind::Counter), st.metric);
    });
  };
  check(stats::StoreStats{});
  check(stats::EngineStats{});
  check(stats::PromptCacheStats{});
  check(stats::SessionStats{});
  check(stats::GenerateStats{});
  check(stats::LayerCounters{});
  check(stats::ServeStats{});
}

TEST_CASE("stats: Cap'n Proto and JSON round trips keep every statistic") {
  const auto engine = numbered<stats::EngineStats>();
  capnp::MallocMessageBuilder m;
  auto b = m.initRoot<waste::proto::EngineStats>();
  stats::to_capnp(engine, b);
  CHECK(b.getPrefetchWasted() == engine.experts.prefetch_wasted);  // the counters the old copies dropped
  CHECK(b.getMaxBatch() == engine.max_batch);
  const auto back = stats::from_capnp<stats::EngineStats>(b.asReader());
  const nlohmann::json j = stats::to_json(back);
  CHECK(j["prefetch"]["wasted"] == engine.experts.prefetch_wasted);
  CHECK(j["tok_per_s"] == engine.tok_per_s);
  const auto again = stats::from_json<stats::EngineStats>(j);
  stats::EngineStats::each_pair(engine, again, [](const stats::Stat& st, const auto& a, const auto& z) {
    CHECK_MESSAGE(a == z, st.name);
  });

  const auto store = numbered<stats::StoreStats>();
  capnp::MallocMessageBuilder m2;
  auto sb = m2.initRoot<waste::proto::Stats>();
  stats::to_capnp(store, sb);
  const nlohmann::json sj = stats::to_json(stats::from_capnp<stats::StoreStats>(sb.asReader()));
  CHECK(sj["latency_us"]["p99"] == store.p99_us);
  CHECK(sj["prefetch"]["issued"] == store.prefetch_issued);
  // What compute reads back from iod's JSON as its own expert counters.
  const auto seen = stats::from_json<stats::ExpertSourceStats>(sj);
  CHECK(seen.hits == store.hits);
  CHECK(seen.bytes_read == store.bytes_read);
  CHECK(seen.prefetch_used == store.prefetch_used);
}

TEST_CASE("stats: a request's statistics and a layer's counters round-trip through Cap'n Proto and JSON") {
  const auto req = numbered<stats::GenerateStats>();
  capnp::MallocMessageBuilder m;
  auto b = m.initRoot<waste::proto::GenerateStats>();
  stats::to_capnp(req, b);
  CHECK(b.getQueueSeconds() == req.queue_seconds);
  CHECK(b.getPrefetchUsed() == req.experts.prefetch_used);
  CHECK(b.getImageSeconds() == req.image_seconds);
  const auto back = stats::from_capnp<stats::GenerateStats>(b.asReader());
  const auto again = stats::from_json<stats::GenerateStats>(stats::to_json(back));
  stats::GenerateStats::each_pair(req, again, [](const stats::Stat& st, const auto& a, const auto& z) {
    CHECK_MESSAGE(a == z, st.name);
  });

  const auto layer = numbered<stats::LayerCounters>();
  capnp::MallocMessageBuilder m2;
  auto lb = m2.initRoot<waste::proto::LayerStats>();
  stats::to_capnp(layer, lb);
  CHECK(lb.getHits() == layer.hits);
  CHECK(lb.getMisses() == layer.misses);
  CHECK(lb.getLayer() == 0u);  // not a statistic: left to the caller
}

TEST_CASE("stats: sums and differences cover every counter; a counter that steps back gives 0") {
  const auto a = numbered<stats::ExpertSourceStats>();
  const auto sum = stats::plus(a, a);
  CHECK(sum.prefetch_issued == 2 * a.prefetch_issued);
  CHECK(sum.prefetch_wasted == 2 * a.prefetch_wasted);
  const auto d = stats::minus(sum, a);
  stats::ExpertSourceStats::each_pair(d, a, [](const stats::Stat& st, auto x, auto y) { CHECK_MESSAGE(x == y, st.name); });
  const auto none = stats::minus(a, sum);
  stats::each(none, [](const stats::Stat& st, auto v) { CHECK_MESSAGE(v == 0, st.name); });
  const auto half = stats::share(sum, 1, 2);
  CHECK(half.prefetch_used == a.prefetch_used);
  // Into a bigger struct that holds the group.
  stats::SessionStats s;
  stats::add(s.experts, a);
  CHECK(s.experts.bytes_read == a.bytes_read);
}

TEST_CASE("stats: the Prometheus text of a list") {
  stats::PromptCacheStats pc;
  pc.hits = 3;
  pc.budget_bytes = 64ull << 20;
  std::string o;
  stats::write_metrics(o, pc);
  CHECK(o.find("# HELP waste_prompt_cache_hits_total Prompts that started from a prompt-cache checkpoint.\n"
               "# TYPE waste_prompt_cache_hits_total counter\nwaste_prompt_cache_hits_total 3\n") != std::string::npos);
  CHECK(o.find("# TYPE waste_prompt_cache_budget_bytes gauge\nwaste_prompt_cache_budget_bytes 67108864\n") !=
        std::string::npos);
  stats::EngineStats e;
  e.experts.bytes_read = 1500000000;
  o.clear();
  stats::write_metrics(o, e);
  CHECK(o.find("\nwaste_expert_read_gigabytes_total 1.5\n") != std::string::npos);
  // waste-serve's own: every one of its statistics is a metric, in list order.
  stats::ServeStats sv;
  sv.http_refused = 2;
  sv.image_seconds = 0.25;
  o.clear();
  stats::write_metrics(o, sv);
  CHECK(o.find("# TYPE waste_http_connections_refused_total counter\nwaste_http_connections_refused_total 2\n") !=
        std::string::npos);
  CHECK(o.find("# TYPE waste_http_connections gauge\nwaste_http_connections 0\n") != std::string::npos);
  CHECK(o.find("\nwaste_vision_seconds_total 0.25\n") != std::string::npos);
  CHECK(o.find("waste_images_total") < o.find("waste_http_abandoned_total"));
}
