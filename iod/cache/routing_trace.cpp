#include "iod/cache/routing_trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste::cache {

RoutingTrace RoutingTrace::slice(size_t begin, size_t end) const {
  require(begin <= end && end <= tokens(), source + ": slice out of range");
  RoutingTrace t = *this;
  t.source = source + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
  t.token_ids.assign(token_ids.begin() + begin, token_ids.begin() + end);
  size_t per = size_t(moe_layers) * top_k;
  t.experts.assign(experts.begin() + begin * per, experts.begin() + end * per);
  return t;
}

RoutingTrace parse_routing_trace(std::string_view text, const std::string& source) {
  require(text.size() <= kMaxTraceBytes, source + ": trace larger than " + std::to_string(kMaxTraceBytes) + " bytes");
  RoutingTrace t;
  t.source = source;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    const std::string where = source + ":" + std::to_string(line_no);
    require(line.size() <= kMaxTraceLineBytes, where + ": line longer than " + std::to_string(kMaxTraceLineBytes) + " bytes");
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
    require(t.tokens() < kMaxTraceTokens, where + ": more than " + std::to_string(kMaxTraceTokens) + " tokens");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": not valid JSON (" + e.what() + ")");
    }
    require(j.is_object(), where + ": expected a JSON object");
    require(j.contains("tok") && j["tok"].is_number_integer(), where + ": missing integer field \"tok\"");
    require(j.contains("layers") && j["layers"].is_array(), where + ": missing array field \"layers\"");
    const auto& layers = j["layers"];
    require(!layers.empty() && layers.size() <= kMaxTraceLayers,
            where + ": \"layers\" has " + std::to_string(layers.size()) + " entries (1.." +
                std::to_string(kMaxTraceLayers) + " allowed)");
    if (t.moe_layers == 0) t.moe_layers = uint32_t(layers.size());
    require(layers.size() == t.moe_layers, where + ": " + std::to_string(layers.size()) + " layers, earlier lines had " +
                                               std::to_string(t.moe_layers));
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& ex = layers[l];
      const std::string lw = where + ": layer " + std::to_string(l);
      require(ex.is_array() && !ex.empty() && ex.size() <= kMaxTraceTopK,
              lw + ": expected an array of 1.." + std::to_string(kMaxTraceTopK) + " expert ids");
      if (t.top_k == 0) t.top_k = uint32_t(ex.size());
      require(ex.size() == t.top_k, lw + ": " + std::to_string(ex.size()) + " experts, expected " + std::to_string(t.top_k));
      size_t first = t.experts.size();
      for (const auto& e : ex) {
        require(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= kMaxTraceExpertId,
                lw + ": expert id " + e.dump() + " is not an integer in 0.." + std::to_string(kMaxTraceExpertId));
        uint32_t id = uint32_t(e.get<int64_t>());
        require(std::find(t.experts.begin() + first, t.experts.end(), id) == t.experts.end(),
                lw + ": expert " + std::to_string(id) + " listed twice");
        t.experts.push_back(id);
        t.max_expert = std::max(t.max_expert, id);
      }
    }
    t.token_ids.push_back(j["tok"].get<int64_t>());
  }
  require(t.tokens() > 0, source + ": no tokens");
  return t;
}

RoutingTrace read_routing_trace(const std::string& path) {
  return parse_routing_trace(read_file_text(path, kMaxTraceBytes), path);
}

}  // namespace waste::cache
