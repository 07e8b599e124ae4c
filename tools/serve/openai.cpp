#include "tools/serve/openai.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <random>
#include <string_view>

namespace waste::serve {

namespace {

std::vector<std::string>& private_paths() {
  static std::vector<std::string> paths;
  return paths;
}

// Absolute paths in a message, but an endpoint of this server's: a path starts with '/' where a
// word starts and runs to the next space, quote, bracket or comma.
std::string scrub_paths(std::string m) {
  for (const std::string& p : private_paths()) {
    if (p.size() < 2) continue;  // "/" alone would take every slash
    for (size_t at = m.find(p); at != std::string::npos; at = m.find(p, at + 6)) m.replace(at, p.size(), "<path>");
  }
  std::string out;
  size_t i = 0;
  while (i < m.size()) {
    const bool word_start = i == 0 || std::string_view(" \t'\"(=,[<").find(m[i - 1]) != std::string_view::npos;
    if (m[i] != '/' || !word_start) {
      out += m[i++];
      continue;
    }
    size_t end = i;
    while (end < m.size() && std::string_view(" \t'\"),]>").find(m[end]) == std::string_view::npos) ++end;
    // A '.', ':' or ';' at the end closes the sentence or clause, not the path.
    while (end > i + 1 && std::string_view(".:;").find(m[end - 1]) != std::string_view::npos) --end;
    const std::string_view path(m.data() + i, end - i);
    const bool endpoint = path.rfind("/v1/", 0) == 0 || path == "/v1" || path == "/health" || path == "/metrics";
    out += endpoint || path.size() == 1 ? std::string(path) : std::string("<path>");
    i = end;
  }
  return out;
}

}  // namespace

void set_private_paths(std::vector<std::string> paths) {
  // Longest first: a socket path inside the run directory goes whole, not as "<path>/compute.sock".
  std::sort(paths.begin(), paths.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  private_paths() = std::move(paths);
}

std::string client_message(const ApiError& e, const std::string& request_id) {
  const std::string id = request_id.empty() ? "" : " (request " + request_id + "; the server's log has the details)";
  if (e.status >= 500) {
    if (e.code == "compute_unavailable") return "compute is unavailable: try again later" + id;
    if (e.code == "iod_unavailable") return "the expert store (iod) is unavailable: try again later" + id;
    return "internal server error" + id;
  }
  return scrub_paths(e.message);
}

nlohmann::json error_body(const ApiError& e, const std::string& request_id) {
  nlohmann::json j = {{"message", client_message(e, request_id)}, {"type", e.type}};
  j["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  j["code"] = e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code);
  return {{"error", j}};
}

namespace {

struct Bad {
  std::string param, message;
};

double number(const chat::Json& body, const char* name, double lo, double hi) {
  const auto& v = body[name];
  if (!v.is_number()) throw Bad{name, std::string(name) + " must be a number"};
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw Bad{name, std::string(name) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi)};
  return x;
}

bool present(const chat::Json& body, const char* name) { return body.contains(name) && !body[name].is_null(); }

// A seed no other request is likely to share (the OS's entropy, 64 bits).
uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

// What an image reference is, checked without I/O: a data: URL (false) or a local file (true:
// a file:// URL or a path, only with --image-dir). The server fetches nothing, so an http(s)
// URL is refused, and so is any other scheme.
bool is_local_file(const std::string& url, const std::string& field, const Limits& limits) {
  if (url.empty()) throw Bad{field, "the image URL is empty"};
  if (starts_with_nocase(url, "http://") || starts_with_nocase(url, "https://"))
    throw Bad{field, "the server fetches nothing: send the image as a data: URL (data:image/png;base64,...)"};
  if (starts_with_nocase(url, "data:")) return false;
  if (!starts_with_nocase(url, "file://") && url.find("://") != std::string::npos)
    throw Bad{field, "an image URL must be a data: URL (data:image/png;base64,...)"};
  if (!limits.local_images)
    throw Bad{field, "this server reads no local image files (waste-serve --image-dir DIR allows them): send a data: URL"};
  return true;
}

// image_url.detail: true for "low", false for "auto", "high" or none given.
bool low_detail(const chat::Json& image_url, const std::string& field) {
  if (!image_url.is_object() || !image_url.contains("detail") || image_url["detail"].is_null()) return false;
  const chat::Json& d = image_url["detail"];
  if (d == "low") return true;
  if (d == "auto" || d == "high") return false;
  throw Bad{field, "detail must be \"auto\", \"low\" or \"high\""};
}

// The image parts of a parsed chat, with the names the client gave them (from the raw JSON:
// the parser keeps content parts one for one). The patch budget is per request, so every image
// must ask for the same detail.
std::vector<ImagePart> image_parts(const chat::Json& messages, const chat::ChatRequest& c, const Limits& limits,
                                   bool* all_low) {
  std::vector<ImagePart> out;
  for (size_t i = 0; i < c.messages.size(); ++i)
    for (size_t k = 0; k < c.messages[i].content.size(); ++k) {
      if (c.messages[i].content[k].kind != chat::ContentPart::Kind::Image) continue;
      const chat::Json& raw = messages[i]["content"][k];
      ImagePart ip;
      if (out.size() == size_t(kMaxImagesPerRequest))
        throw Bad{"messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]",
                  "more than " + std::to_string(kMaxImagesPerRequest) + " images in one request"};
      ip.message = i;
      ip.part = k;
      ip.field = "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]";
      bool low = false;
      if (raw["type"] == "image_url") {
        const chat::Json& u = raw["image_url"];
        ip.url_field = ip.field + (u.is_string() ? ".image_url" : ".image_url.url");
        low = low_detail(u, ip.field + ".image_url.detail");
      } else {
        ip.url_field = ip.field + ".image";  // K3's own {"type": "image", "image": URL}
      }
      ip.local_file = is_local_file(c.messages[i].content[k].text, ip.url_field, limits);
      if (!out.empty() && low != *all_low)
        throw Bad{ip.field + ".image_url.detail", "every image of a request takes the same detail (the patch budget is "
                                                  "per request): this one differs from " + out[0].field + "'s"};
      *all_low = low;
      out.push_back(std::move(ip));
    }
  return out;
}

// The JSON of a body, built by nlohmann's own tree builder (one pass, no copy) while its values
// and its nesting are counted: past a bound the parse stops, before the tree grows further.
// (nlohmann's parse callback would count as well, but its tree builder scans the parent for
// discarded values at each object's end: quadratic in an array of many small objects.)
class BoundedJsonParser {
 public:
  enum class Over { None, Elements, Depth };
  BoundedJsonParser(chat::Json& out, const Limits& limits) : dom_(out, false), limits_(limits) {}
  Over over() const { return over_; }

  bool null() { return count() && dom_.null(); }
  bool boolean(bool v) { return count() && dom_.boolean(v); }
  bool number_integer(chat::Json::number_integer_t v) { return count() && dom_.number_integer(v); }
  bool number_unsigned(chat::Json::number_unsigned_t v) { return count() && dom_.number_unsigned(v); }
  bool number_float(chat::Json::number_float_t v, const chat::Json::string_t& s) { return count() && dom_.number_float(v, s); }
  bool string(chat::Json::string_t& v) { return count() && dom_.string(v); }
  bool binary(chat::Json::binary_t& v) { return count() && dom_.binary(v); }
  bool start_object(std::size_t n) { return open() && dom_.start_object(n); }
  bool end_object() { return --depth_, dom_.end_object(); }
  bool start_array(std::size_t n) { return open() && dom_.start_array(n); }
  bool end_array() { return --depth_, dom_.end_array(); }
  bool key(chat::Json::string_t& k) { return dom_.key(k); }
  template <class Exception>
  bool parse_error(std::size_t at, const std::string& token, const Exception& e) { return dom_.parse_error(at, token, e); }

 private:
  bool count() {
    if (++elements_ <= limits_.max_json_elements) return true;
    over_ = Over::Elements;
    return false;
  }
  bool open() {
    if (++depth_ <= limits_.max_json_depth) return count();
    over_ = Over::Depth;
    return false;
  }
  nlohmann::detail::json_sax_dom_parser<chat::Json> dom_;
  const Limits& limits_;
  uint64_t elements_ = 0;
  int depth_ = 0;
  Over over_ = Over::None;
};

// A completion's prompt that holds content parts with images: said plainly, images are a chat's.
bool has_image_parts(const chat::Json& prompt) {
  if (!prompt.is_array()) return false;
  for (const chat::Json& x : prompt)
    if (x.is_object() && (x.value("type", "") == "image_url" || x.value("type", "") == "image" || x.contains("image_url")))
      return true;
  return false;
}

// A chat's parts that cost the server more than their bytes, bounded before they are parsed:
// messages, tools and the schemas that become grammars.
void check_sizes(const chat::Json& j, const Limits& limits) {
  if (j["messages"].size() > limits.max_messages)
    throw Bad{"messages", "more than " + std::to_string(limits.max_messages) + " messages (waste-serve --max-messages)"};
  if (present(j, "tools") && j["tools"].is_array()) {
    const auto& tools = j["tools"];
    if (tools.size() > limits.max_tools)
      throw Bad{"tools", "more than " + std::to_string(limits.max_tools) + " tools (waste-serve --max-tools)"};
    for (size_t i = 0; i < tools.size(); ++i)
      if (tools[i].dump().size() > limits.max_schema_bytes)
        throw Bad{"tools[" + std::to_string(i) + "]", "the tool's definition is more than " +
                                                          std::to_string(limits.max_schema_bytes) +
                                                          " bytes of JSON (waste-serve --max-schema-bytes)"};
  }
  if (present(j, "response_format") && j["response_format"].dump().size() > limits.max_schema_bytes)
    throw Bad{"response_format", "response_format is more than " + std::to_string(limits.max_schema_bytes) +
                                     " bytes of JSON (waste-serve --max-schema-bytes)"};
}

}  // namespace

std::optional<ParsedRequest> parse_request(const std::string& body, bool chat, const Limits& limits, ApiError* err) {
  chat::Json j;
  BoundedJsonParser sax(j, limits);
  if (!chat::Json::sax_parse(body, &sax)) {
    if (sax.over() == BoundedJsonParser::Over::Elements)
      *err = {413, "the request body holds more than " + std::to_string(limits.max_json_elements) + " JSON values",
              "invalid_request_error", "", "payload_too_large"};
    else if (sax.over() == BoundedJsonParser::Over::Depth)
      *err = {400, "the request body nests JSON deeper than " + std::to_string(limits.max_json_depth) + " levels",
              "invalid_request_error", "", "invalid_json"};
    else
      *err = {400, "the request body is not valid JSON", "invalid_request_error", "", "invalid_json"};
    return std::nullopt;
  }
  if (!j.is_object()) {
    *err = {400, "the request body must be a JSON object", "invalid_request_error", "", ""};
    return std::nullopt;
  }
  try {
    ParsedRequest p;
    client::Request& r = p.request;
    // Every field is understood or refused: a client must never get a 200 that ignored it.
    static const std::vector<std::string> common = {
        "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "stop",
        "stream", "stream_options", "n", "user", "frequency_penalty", "presence_penalty", "logprobs"};
    static const std::vector<std::string> chat_only = {"max_completion_tokens", "top_logprobs"};
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      auto in = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), k) != v.end(); };
      if (in(common) || (chat && (in(chat_only) || in(chat::chat_request_fields())))) continue;
      if (!chat && k == "messages") throw Bad{k, "messages belong to /v1/chat/completions; this endpoint takes a prompt"};
      if (chat && k == "prompt") throw Bad{k, "prompt belongs to /v1/completions; this endpoint takes messages"};
      if (k == "prompt") continue;
      throw Bad{k, "unsupported field \"" + k + "\""};
    }
    if (chat) {
      if (!j.contains("messages")) throw Bad{"messages", "messages is required"};
      if (!j["messages"].is_array() || j["messages"].empty()) throw Bad{"messages", "messages must be a non-empty array"};
      check_sizes(j, limits);
      r.kind = client::Request::Kind::Chat;
      try {
        r.chat = chat::parse_chat_request(j);
      } catch (const chat::RequestError& e) {
        throw Bad{e.param, e.what()};
      }
      if (r.chat.image_prompts) throw Bad{"image_prompts", "image_prompts are made by the server from image content parts"};
      p.images = image_parts(j["messages"], r.chat, limits, &p.low_detail);
      for (const auto& m : r.chat.messages)
        for (const auto& part : m.content)
          if (part.kind == chat::ContentPart::Kind::Text) p.prompt_text += part.text;
      if (present(j, "parallel_tool_calls")) p.parallel_tool_calls = j["parallel_tool_calls"].get<bool>();
      if (present(j, "logprobs")) {
        if (!j["logprobs"].is_boolean()) throw Bad{"logprobs", "logprobs must be a boolean"};
        r.logprobs = j["logprobs"].get<bool>();
      }
      if (present(j, "top_logprobs")) {
        if (!j["top_logprobs"].is_number_integer() || j["top_logprobs"].get<int64_t>() < 0 || j["top_logprobs"].get<int64_t>() > 20)
          throw Bad{"top_logprobs", "top_logprobs must be an integer from 0 to 20"};
        if (!r.logprobs) throw Bad{"top_logprobs", "top_logprobs needs logprobs: true"};
        r.top_logprobs = uint32_t(j["top_logprobs"].get<int64_t>());
      }
    } else {
      if (!j.contains("prompt")) throw Bad{"prompt", "prompt is required"};
      const auto& pr = j["prompt"];
      if (has_image_parts(pr))
        throw Bad{"prompt", "/v1/completions takes no images: send them as image_url content parts of "
                            "/v1/chat/completions messages"};
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
      // The legacy API's logprobs is a count of alternatives (0-5).
      if (present(j, "logprobs")) {
        if (!j["logprobs"].is_number_integer() || j["logprobs"].get<int64_t>() < 0 || j["logprobs"].get<int64_t>() > 5)
          throw Bad{"logprobs", "logprobs must be an integer from 0 to 5"};
        r.logprobs = true;
        r.top_logprobs = uint32_t(j["logprobs"].get<int64_t>());
      }
    }
    if (p.prompt_text.size() > limits.max_prompt_bytes)
      throw Bad{chat ? "messages" : "prompt", "the prompt is longer than " + std::to_string(limits.max_prompt_bytes) + " bytes"};

    // Either name (max_tokens is the older): each checked; both only if they agree.
    std::optional<int64_t> max_tokens;
    for (const char* mt : {"max_tokens", "max_completion_tokens"}) {
      if (!present(j, mt)) continue;
      if (!j[mt].is_number_integer()) throw Bad{mt, std::string(mt) + " must be an integer"};
      const int64_t n = j[mt].get<int64_t>();
      if (n < 1 || n > int64_t(limits.max_tokens_cap))
        throw Bad{mt, std::string(mt) + " must be between 1 and " + std::to_string(limits.max_tokens_cap)};
      if (max_tokens && *max_tokens != n)
        throw Bad{mt, "max_tokens and max_completion_tokens differ (" + std::to_string(*max_tokens) + " and " +
                          std::to_string(n) + "): send one of them"};
      max_tokens = n;
    }
    r.max_tokens = max_tokens ? uint32_t(*max_tokens) : 256;
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
    } else {
      // As OpenAI: without a seed, sampled replies differ from call to call (greedy ones, the
      // default temperature 0, do not depend on it).
      r.seed = fresh_seed();
    }
    if (present(j, "stop")) {
      const auto& s = j["stop"];
      if (s.is_string()) {
        r.stop.push_back(s.get<std::string>());
      } else if (s.is_array()) {
        if (s.size() > limits.max_stop)
          throw Bad{"stop", "at most " + std::to_string(limits.max_stop) + " stop sequences (waste-serve --max-stop)"};
        for (const auto& x : s) {
          if (!x.is_string()) throw Bad{"stop", "stop must be a string or an array of strings"};
          r.stop.push_back(x.get<std::string>());
        }
      } else {
        throw Bad{"stop", "stop must be a string or an array of strings"};
      }
      for (const auto& x : r.stop)
        if (x.empty() || x.size() > limits.max_stop_bytes)
          throw Bad{"stop", "a stop sequence must have 1 to " + std::to_string(limits.max_stop_bytes) +
                                " bytes (waste-serve --max-stop-bytes)"};
    }
    if (present(j, "stream")) {
      if (!j["stream"].is_boolean()) throw Bad{"stream", "stream must be a boolean"};
      p.stream = j["stream"].get<bool>();
    }
    if (present(j, "stream_options")) {
      if (!p.stream) throw Bad{"stream_options", "stream_options is only allowed when stream is true"};
      const auto& so = j["stream_options"];
      if (!so.is_object()) throw Bad{"stream_options", "stream_options must be an object"};
      for (auto it = so.begin(); it != so.end(); ++it)
        if (it.key() != "include_usage") throw Bad{"stream_options." + it.key(), "unsupported field"};
      if (so.contains("include_usage")) {
        if (!so["include_usage"].is_boolean()) throw Bad{"stream_options.include_usage", "include_usage must be a boolean"};
        p.include_usage = so["include_usage"].get<bool>();
        p.usage_said = true;
      }
    }
    if (present(j, "n")) {
      if (!j["n"].is_number_integer() || j["n"].get<int64_t>() != 1) throw Bad{"n", "only n = 1 is supported"};
    }
    if (present(j, "model")) {
      if (!j["model"].is_string()) throw Bad{"model", "model must be a string"};
      p.model = j["model"].get<std::string>();
    }
    if (present(j, "user") && !j["user"].is_string()) throw Bad{"user", "user must be a string"};
    if (present(j, "frequency_penalty")) r.frequency_penalty = float(number(j, "frequency_penalty", -2, 2));
    if (present(j, "presence_penalty")) r.presence_penalty = float(number(j, "presence_penalty", -2, 2));
    if (present(j, "min_p")) {
      r.min_p = float(number(j, "min_p", 0, 1));
      if (r.min_p >= 1) throw Bad{"min_p", "min_p must be less than 1"};
    }
    if (present(j, "repetition_penalty")) {
      r.repetition_penalty = float(number(j, "repetition_penalty", 0, 100));
      if (r.repetition_penalty <= 0) throw Bad{"repetition_penalty", "repetition_penalty must be greater than 0"};
    }
    return p;
  } catch (const Bad& b) {
    *err = {400, b.message, "invalid_request_error", b.param, ""};
    return std::nullopt;
  }
}

const char* finish_reason(const client::Result& r) {
  if (r.stop_reason == "max_tokens" || r.stop_reason == "context") return "length";
  if (r.tool_calls > 0) return "tool_calls";
  return "stop";
}

nlohmann::json usage_json(const client::Result& r) {
  // As OpenAI reports prompt caching: the prompt tokens that were not computed again.
  nlohmann::json details = {{"cached_tokens", r.cached_tokens}};
  if (r.image_tokens > 0) details["image_tokens"] = r.image_tokens;
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.tokens},
          {"total_tokens", r.prompt_tokens + r.tokens},
          {"prompt_tokens_details", std::move(details)}};
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

}  // namespace waste::serve
