// Builds small routing traces in memory for the cache tests.
#pragma once
#include <string>
#include <vector>

#include "iod/cache/routing_trace.h"

namespace waste::cache::testing {

// tokens[t][layer] = the experts routed to at that layer.
inline RoutingTrace make_trace(const std::vector<std::vector<std::vector<int>>>& tokens) {
  std::string text;
  for (size_t t = 0; t < tokens.size(); ++t) {
    text += "{\"tok\": " + std::to_string(t) + ", \"layers\": [";
    for (size_t l = 0; l < tokens[t].size(); ++l) {
      text += l ? ", [" : "[";
      for (size_t j = 0; j < tokens[t][l].size(); ++j) text += (j ? ", " : "") + std::to_string(tokens[t][l][j]);
      text += "]";
    }
    text += "]}\n";
  }
  return parse_routing_trace(text, "test-trace");
}

inline std::string shared_trace(const char* name) {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  return std::string(dir ? dir : "../shared") + "/traces/" + name;
}

}  // namespace waste::cache::testing
