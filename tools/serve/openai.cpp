#include "tools/serve/openai.h"

#include <cmath>

namespace waste::serve {

nlohmann::json error_body(const ApiError& e) {
  nlohmann::json j = {{"message", e.message}, {"type", e.type}};
  j["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  j["code"] = e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code);
  return {{"error", j}};
}

namespace {

struct Bad {
  std::string param, message;
};

// Text of a message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const nlohmann::json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (c.is_array()) {
    std::string out;
    for (const auto& part : c) {
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        throw Bad{where, "each content part must be an object with a string \"type\""};
      if (part["type"] != "text") throw Bad{where, "only text content parts are supported"};
      if (!part.contains("text") || !part["text"].is_string()) throw Bad{where, "a text part needs a string \"text\""};
      out += part["text"].get<std::string>();
    }
    return out;
  }
  throw Bad{where, "content must be a string or an array of text parts"};
}

double number(const nlohmann::json& body, const char* name, double lo, double hi) {
  const auto& v = body[name];
  if (!v.is_number()) throw Bad{name, std::string(name) + " must be a number"};
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw Bad{name, std::string(name) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi)};
  return x;
}

bool present(const nlohmann::json& body, const char* name) { return body.contains(name) && !body[name].is_null(); }

}  // namespace

std::optional<ParsedRequest> parse_request(const std::string& body, bool chat, const Limits& limits, ApiError* err) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) {
    *err = {400, "the request body is not valid JSON", "invalid_request_error", "", "invalid_json"};
    return std::nullopt;
  }
  if (!j.is_object()) {
    *err = {400, "the request body must be a JSON object"};
    return std::nullopt;
  }
  try {
    ParsedRequest p;
    client::Request& r = p.request;
    if (chat) {
      if (!j.contains("messages")) throw Bad{"messages", "messages is required"};
      const auto& m = j["messages"];
      if (!m.is_array() || m.empty()) throw Bad{"messages", "messages must be a non-empty array"};
      r.kind = client::Request::Kind::Chat;
      for (size_t i = 0; i < m.size(); ++i) {
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m[i].is_object()) throw Bad{where, where + " must be an object"};
        if (!m[i].contains("role") || !m[i]["role"].is_string()) throw Bad{where + ".role", "role must be a string"};
        std::string role = m[i]["role"].get<std::string>();
        if (role == "developer") role = "system";
        if (role != "system" && role != "user" && role != "assistant" && role != "tool")
          throw Bad{where + ".role", "role must be system, developer, user, assistant or tool"};
        std::string text = m[i].contains("content") ? content_text(m[i]["content"], where + ".content") : "";
        p.prompt_text += text;
        r.chat.emplace_back(role, std::move(text));
      }
    } else {
      if (!j.contains("prompt")) throw Bad{"prompt", "prompt is required"};
      const auto& pr = j["prompt"];
      if (pr.is_string()) {
        r.text = pr.get<std::string>();
      } else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) {
        r.text = pr[0].get<std::string>();
      } else {
        throw Bad{"prompt", "prompt must be a string (or an array of one string)"};
      }
      if (r.text.empty()) throw Bad{"prompt", "prompt must not be empty"};
      r.kind = client::Request::Kind::Text;
      p.prompt_text = r.text;
    }
    if (p.prompt_text.size() > limits.max_prompt_bytes)
      throw Bad{chat ? "messages" : "prompt", "the prompt is longer than " + std::to_string(limits.max_prompt_bytes) + " bytes"};

    const char* mt = present(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (present(j, mt)) {
      if (!j[mt].is_number_integer()) throw Bad{mt, std::string(mt) + " must be an integer"};
      const int64_t n = j[mt].get<int64_t>();
      if (n < 1 || n > int64_t(limits.max_tokens_cap))
        throw Bad{mt, std::string(mt) + " must be between 1 and " + std::to_string(limits.max_tokens_cap)};
      r.max_tokens = uint32_t(n);
    } else {
      r.max_tokens = 256;
    }
    if (present(j, "temperature")) r.temperature = float(number(j, "temperature", 0, 2));
    if (present(j, "top_p")) {
      r.top_p = float(number(j, "top_p", 0, 1));
      if (r.top_p <= 0) throw Bad{"top_p", "top_p must be greater than 0"};
    }
    if (present(j, "top_k")) {
      if (!j["top_k"].is_number_integer() || j["top_k"].get<int64_t>() < 0) throw Bad{"top_k", "top_k must be a non-negative integer"};
      r.top_k = uint32_t(std::min<int64_t>(j["top_k"].get<int64_t>(), 1 << 20));
    }
    if (present(j, "seed")) {
      if (!j["seed"].is_number_integer()) throw Bad{"seed", "seed must be an integer"};
      r.seed = uint64_t(j["seed"].get<int64_t>());
    }
    if (present(j, "stop")) {
      const auto& s = j["stop"];
      if (s.is_string()) {
        r.stop.push_back(s.get<std::string>());
      } else if (s.is_array()) {
        if (s.size() > 4) throw Bad{"stop", "at most 4 stop sequences"};
        for (const auto& x : s) {
          if (!x.is_string()) throw Bad{"stop", "stop must be a string or an array of strings"};
          r.stop.push_back(x.get<std::string>());
        }
      } else {
        throw Bad{"stop", "stop must be a string or an array of strings"};
      }
      for (const auto& x : r.stop)
        if (x.empty() || x.size() > 256) throw Bad{"stop", "a stop sequence must have 1 to 256 bytes"};
    }
    if (present(j, "stream")) {
      if (!j["stream"].is_boolean()) throw Bad{"stream", "stream must be a boolean"};
      p.stream = j["stream"].get<bool>();
    }
    if (present(j, "stream_options")) {
      const auto& so = j["stream_options"];
      if (!so.is_object()) throw Bad{"stream_options", "stream_options must be an object"};
      if (so.contains("include_usage")) {
        if (!so["include_usage"].is_boolean()) throw Bad{"stream_options.include_usage", "include_usage must be a boolean"};
        p.include_usage = so["include_usage"].get<bool>();
      }
    }
    if (present(j, "n")) {
      if (!j["n"].is_number_integer() || j["n"].get<int64_t>() != 1) throw Bad{"n", "only n = 1 is supported"};
    }
    if (present(j, "model") && !j["model"].is_string()) throw Bad{"model", "model must be a string"};
    if (present(j, "user") && !j["user"].is_string()) throw Bad{"user", "user must be a string"};
    for (const char* f : {"frequency_penalty", "presence_penalty"})
      if (present(j, f)) number(j, f, -2, 2);  // accepted and checked, not applied
    return p;
  } catch (const Bad& b) {
    *err = {400, b.message, "invalid_request_error", b.param, ""};
    return std::nullopt;
  }
}

const char* finish_reason(const std::string& s) {
  if (s == "max_tokens" || s == "context") return "length";
  return "stop";
}

nlohmann::json usage_json(const client::Result& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.tokens},
          {"total_tokens", r.prompt_tokens + r.tokens}};
}

}  // namespace waste::serve
