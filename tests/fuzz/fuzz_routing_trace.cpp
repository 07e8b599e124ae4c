// libFuzzer target: untrusted text as a routing trace (JSON lines, iod/cache/routing_trace.h)
// through parse_routing_trace, as `waste iobench --trace` and the cache simulator read one.
// Contract checked: a trace that parses has the shape it claims (tokens x layers x top-k
// experts, each at most max_expert, distinct within a layer), and slices keep it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "iod/cache/routing_trace.h"
#include "shared/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  waste::cache::RoutingTrace t;
  try {
    t = waste::cache::parse_routing_trace(text, "fuzz trace");
  } catch (const waste::Error&) {
    return 0;
  }
  if (t.experts.size() != t.tokens() * t.moe_layers * t.top_k) __builtin_trap();
  for (size_t tok = 0; tok < t.tokens(); ++tok)
    for (uint32_t l = 0; l < t.moe_layers; ++l) {
      std::vector<uint32_t> e(t.layer_experts(tok, l), t.layer_experts(tok, l) + t.top_k);
      std::sort(e.begin(), e.end());
      if (std::adjacent_find(e.begin(), e.end()) != e.end() || (!e.empty() && e.back() > t.max_expert)) __builtin_trap();
    }
  const waste::cache::RoutingTrace half = t.slice(t.tokens() / 2, t.tokens());
  if (half.tokens() != t.tokens() - t.tokens() / 2 || half.experts.size() != half.tokens() * t.moe_layers * t.top_k)
    __builtin_trap();
  return 0;
}
