// Recorded batch-1 decode routing (../shared/traces/*.jsonl): one JSON object per line,
// {"tok": N, "layers": [[e0..e7], ...]}, the routed experts of every MoE layer in order.
// Every line must have the same number of layers and experts per layer; experts within a
// layer are distinct. Sizes are bounded before use; errors name the file and line.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste::cache {

struct RoutingTrace {
  std::string source;
  uint32_t moe_layers = 0;
  uint32_t top_k = 0;
  uint32_t max_expert = 0;           // largest expert id seen
  std::vector<int64_t> token_ids;    // the "tok" field of each line
  std::vector<uint32_t> experts;     // tokens x moe_layers x top_k

  size_t tokens() const { return token_ids.size(); }
  uint32_t working_set_slots() const { return moe_layers * top_k; }
  const uint32_t* layer_experts(size_t token, uint32_t layer) const {
    return experts.data() + (token * moe_layers + layer) * top_k;
  }
  // The tokens [begin, end) as a trace of their own.
  RoutingTrace slice(size_t begin, size_t end) const;
};

constexpr size_t kMaxTraceLineBytes = 1u << 20;
constexpr size_t kMaxTraceBytes = 256u << 20;
constexpr size_t kMaxTraceTokens = 1u << 20;
constexpr uint32_t kMaxTraceLayers = 4096;
constexpr uint32_t kMaxTraceTopK = 256;
constexpr uint32_t kMaxTraceExpertId = 65535;

RoutingTrace parse_routing_trace(std::string_view text, const std::string& source);
RoutingTrace read_routing_trace(const std::string& path);

}  // namespace waste::cache
