#include "tools/iobench/request_trace.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "shared/util/error.h"

namespace waste::iobench {

namespace {

// One connection's token being assembled.
struct Pending {
  std::vector<uint32_t> experts;  // position-major, top_k each
  uint32_t next = 0;              // the MoE position expected next
};

}  // namespace

bool is_request_trace(const std::string& path) {
  std::ifstream f(path);
  require(f.good(), "iobench: cannot read trace " + path);
  std::string line;
  line.reserve(4096);
  char ch;
  while (f.get(ch) && ch != '\n') {
    require(line.size() < cache::kMaxTraceLineBytes, path + ": line 1 is over the line limit");
    line.push_back(ch);
  }
  auto j = nlohmann::json::parse(line, nullptr, false);
  return j.is_object() && j.contains("op");
}

cache::RoutingTrace routing_from_request_trace(const std::string& path, const std::vector<uint32_t>& moe_layers) {
  require(!moe_layers.empty() && moe_layers.size() <= cache::kMaxTraceLayers, path + ": bad MoE layer list");
  std::ifstream f(path, std::ios::binary);
  require(f.good(), "iobench: cannot read trace " + path);
  f.seekg(0, std::ios::end);
  require(uint64_t(f.tellg()) <= cache::kMaxTraceBytes,
          path + ": over " + std::to_string(cache::kMaxTraceBytes) + " bytes, too big for a trace");
  f.seekg(0);
  std::map<uint32_t, uint32_t> position;  // decoder layer -> MoE position
  for (size_t i = 0; i < moe_layers.size(); ++i) position[moe_layers[i]] = uint32_t(i);
  const uint32_t L = uint32_t(moe_layers.size());

  cache::RoutingTrace t;
  t.source = path;
  t.moe_layers = L;
  std::map<uint64_t, Pending> conns;
  std::string line;
  size_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    const std::string at = path + ":" + std::to_string(lineno) + ": ";
    if (line.empty()) continue;
    require(line.size() <= cache::kMaxTraceLineBytes, at + "line too long");
    auto j = nlohmann::json::parse(line, nullptr, false);
    require(j.is_object() && j.contains("op") && j["op"].is_string(), at + "not an iod request line (no \"op\")");
    // A touch is a use served without a fetch (compute read the slot unpinned, PROTOCOL.md):
    // routing as a fetch is; a prefetch is a hint, not routing.
    if (j["op"] != "fetch" && j["op"] != "touch") continue;
    require(j.contains("conn") && j["conn"].is_number_unsigned() && j.contains("layer") &&
                j["layer"].is_number_unsigned() && j.contains("experts") && j["experts"].is_array(),
            at + "a fetch needs conn, layer and experts");
    const uint64_t conn = j["conn"].get<uint64_t>();
    const auto layer = j["layer"].get<uint64_t>();
    auto pit = layer <= UINT32_MAX ? position.find(uint32_t(layer)) : position.end();
    require(pit != position.end(), at + "layer " + std::to_string(layer) + " is not a MoE layer of the container");
    const auto& ex = j["experts"];
    require(!ex.empty() && ex.size() <= cache::kMaxTraceTopK,
            at + std::to_string(ex.size()) + " experts (1.." + std::to_string(cache::kMaxTraceTopK) + " expected)");
    if (t.top_k == 0) t.top_k = uint32_t(ex.size());
    require(ex.size() == t.top_k, at + std::to_string(ex.size()) + " experts; earlier fetches had " +
                                      std::to_string(t.top_k) + " (a routing trace has one top-k)");
    std::vector<uint32_t> e;
    for (const auto& x : ex) {
      require(x.is_number_unsigned() && x.get<uint64_t>() <= cache::kMaxTraceExpertId, at + "bad expert id");
      e.push_back(x.get<uint32_t>());
    }
    std::vector<uint32_t> sorted = e;
    std::sort(sorted.begin(), sorted.end());
    require(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), at + "an expert is listed twice");

    Pending& p = conns[conn];
    const uint32_t pos = pit->second;
    if (pos == 0) p = {};  // a new token (an unfinished one before it is dropped)
    if (pos != p.next) {   // a token that did not start at the first layer, or skipped one
      p = {};
      p.next = UINT32_MAX;  // ignore fetches until this connection's next token starts
      continue;
    }
    p.experts.insert(p.experts.end(), e.begin(), e.end());
    if (++p.next == L) {
      require(t.tokens() < cache::kMaxTraceTokens, at + "too many tokens");
      t.token_ids.push_back(int64_t(t.tokens()));
      for (uint32_t x : p.experts) t.max_expert = std::max(t.max_expert, x);
      t.experts.insert(t.experts.end(), p.experts.begin(), p.experts.end());
      p = {};
    }
  }
  require(t.tokens() > 0, path + ": no complete token (a fetch of every MoE layer in order) in the request trace");
  return t;
}

}  // namespace waste::iobench
