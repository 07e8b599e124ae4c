#include <doctest/doctest.h>

#include <string>

#include "iod/cache/routing_trace.h"
#include "shared/util/error.h"
#include "tests/unit/cache/trace_helpers.h"

using namespace waste::cache;

namespace {
std::string error_of(const std::string& text) {
  try {
    parse_routing_trace(text, "t.jsonl");
  } catch (const waste::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the shared traces parse with the documented shapes") {
  RoutingTrace k = read_routing_trace(waste::cache::testing::shared_trace("kimi-linear-300.jsonl"));
  CHECK_EQ(k.tokens(), 300);
  CHECK_EQ(k.moe_layers, 26);
  CHECK_EQ(k.top_k, 8);
  CHECK_EQ(k.working_set_slots(), 208);
  CHECK_LE(k.max_expert, 255);
  RoutingTrace o = read_routing_trace(waste::cache::testing::shared_trace("olmoe-299.jsonl"));
  CHECK_EQ(o.tokens(), 299);
  CHECK_EQ(o.moe_layers, 16);
  CHECK_EQ(o.working_set_slots(), 128);
  CHECK_EQ(o.token_ids.front(), 1);
  CHECK_EQ(o.layer_experts(0, 0)[0], 6);  // first line: [[6, 8, 15, ...
}

TEST_CASE("bad trace lines are rejected, naming the line") {
  const std::string ok = "{\"tok\": 0, \"layers\": [[1, 2], [3, 4]]}\n";
  CHECK(error_of(ok).empty());
  CHECK(error_of(ok + "{\"tok\": 1, \"layers\": [[1, 2]]}\n").find("t.jsonl:2") != std::string::npos);
  CHECK(error_of(ok + "{\"tok\": 1, \"layers\": [[1, 2], [3]]}").find("t.jsonl:2: layer 1") != std::string::npos);
  CHECK(error_of("{\"tok\": 0, \"layers\": [[1, 1]]}").find("listed twice") != std::string::npos);
  CHECK(error_of("{\"tok\": 0, \"layers\": [[1, -2]]}").find("t.jsonl:1") != std::string::npos);
  CHECK(error_of("{\"tok\": 0, \"layers\": [[1, 99999]]}").find("expert id") != std::string::npos);
  CHECK(error_of("{\"tok\": 0, \"layers\": [[1, 2.5]]}").find("expert id") != std::string::npos);
  CHECK(error_of("{\"tok\": 0, \"layers\": [[1, 2]]\n").find("t.jsonl:1: not valid JSON") != std::string::npos);
  CHECK(error_of("{\"layers\": [[1, 2]]}").find("\"tok\"") != std::string::npos);
  CHECK(error_of("[1, 2]").find("JSON object") != std::string::npos);
  CHECK(error_of("").find("no tokens") != std::string::npos);
  CHECK(error_of(std::string(kMaxTraceLineBytes + 1, ' ')).find("longer than") != std::string::npos);
  // Blank lines are skipped but still counted for error positions.
  CHECK(error_of(ok + "\n{bad").find("t.jsonl:3") != std::string::npos);
}
