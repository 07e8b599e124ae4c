#include "shared/chat/chat_request.h"

#include <cctype>

namespace waste::chat {

namespace {

// Bounds on what a client may send (the HTTP body is bounded too; these keep one field from
// taking all of it in a shape the renderers walk).
constexpr size_t kMaxMessages = 4096;
constexpr size_t kMaxParts = 1024;
constexpr size_t kMaxToolCalls = 256;
constexpr size_t kMaxTools = 512;

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw RequestError(param, message); }

std::string need_string(const Json& v, const std::string& where) {
  if (!v.is_string()) bad(where, "must be a string");
  return v.get<std::string>();
}

std::optional<std::string> optional_string(const Json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return std::nullopt;
  return need_string(obj[key], where + "." + key);
}

// OpenAI's rule for function names: what every client and tool parser expects.
void check_function_name(const std::string& name, const std::string& where) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  if (!ok) bad(where, "a function name is 1 to 64 letters, digits, '_', '-' or '.'");
}

void check_keys(const Json& obj, std::initializer_list<const char*> known, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) bad(where + "." + it.key(), "unsupported field");
  }
}

std::vector<ContentPart> parse_content(const Json& c, const std::string& where) {
  std::vector<ContentPart> out;
  if (c.is_null()) return out;
  if (c.is_string()) {
    out.push_back({ContentPart::Kind::Text, c.get<std::string>(), {}});
    return out;
  }
  if (!c.is_array()) bad(where, "must be a string, an array of content parts or null");
  if (c.size() > kMaxParts) bad(where, "more than " + std::to_string(kMaxParts) + " content parts");
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json& p = c[i];
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) bad(w, "must be an object with a string \"type\"");
    const std::string type = p["type"].get<std::string>();
    if (type == "text") {
      check_keys(p, {"type", "text"}, w);
      if (!p.contains("text")) bad(w + ".text", "is required");
      out.push_back({ContentPart::Kind::Text, need_string(p["text"], w + ".text"), {}});
    } else if (type == "image_url") {
      check_keys(p, {"type", "image_url"}, w);
      if (!p.contains("image_url")) bad(w + ".image_url", "is required");
      const Json& u = p["image_url"];
      std::string url;
      if (u.is_string()) {
        url = u.get<std::string>();
      } else if (u.is_object() && u.contains("url")) {
        check_keys(u, {"url", "detail"}, w + ".image_url");
        url = need_string(u["url"], w + ".image_url.url");
      } else {
        bad(w + ".image_url", "must be an object with a string \"url\"");
      }
      out.push_back({ContentPart::Kind::Image, url, {}});
    } else if (type == "image") {
      check_keys(p, {"type", "image"}, w);
      out.push_back({ContentPart::Kind::Image, p.contains("image") && p["image"].is_string() ? p["image"].get<std::string>() : "", {}});
    } else {
      bad(w + ".type", "unsupported content part type \"" + type + "\" (expected text, image_url or image)");
    }
  }
  return out;
}

ToolCall parse_tool_call(const Json& tc, const std::string& w) {
  if (!tc.is_object()) bad(w, "must be an object");
  check_keys(tc, {"id", "type", "function", "name", "arguments", "index"}, w);
  if (tc.contains("type") && !tc["type"].is_null() && tc["type"] != "function")
    bad(w + ".type", "only \"function\" tool calls are supported");
  ToolCall call;
  call.id = optional_string(tc, "id", w);
  // The function may be nested (OpenAI) or the call itself (K3's encoder accepts both).
  const bool nested = tc.contains("function");
  const Json& fn = nested ? tc["function"] : tc;
  const std::string fw = nested ? w + ".function" : w;
  if (!fn.is_object()) bad(fw, "must be an object");
  if (nested) check_keys(fn, {"name", "arguments"}, fw);
  if (!fn.contains("name")) bad(fw + ".name", "is required");
  call.name = need_string(fn["name"], fw + ".name");
  if (call.name.empty()) bad(fw + ".name", "must not be empty");
  // Ids name calls in prompts and replies; a bounded length keeps them out of the way.
  if (call.id && call.id->size() > 256) bad(w + ".id", "longer than 256 bytes");
  if (fn.contains("arguments")) {
    const Json& a = fn["arguments"];
    if (a.is_string()) call.arguments = a.get<std::string>();
    else if (a.is_object()) call.arguments = py_dumps(a);
    else if (!a.is_null()) bad(fw + ".arguments", "must be a JSON string or an object");
  }
  return call;
}

Message parse_message(const Json& m, const std::string& w) {
  if (!m.is_object()) bad(w, "must be an object");
  if (!m.contains("role") || !m["role"].is_string()) bad(w + ".role", "must be a string");
  Message msg;
  msg.role = m["role"].get<std::string>();
  // OpenAI's newer clients send "developer" for what older ones call "system".
  if (msg.role == "developer") msg.role = "system";
  if (msg.role == "user") {
    check_keys(m, {"role", "content", "name"}, w);
  } else if (msg.role == "system") {
    check_keys(m, {"role", "content", "name", "tools"}, w);
  } else if (msg.role == "assistant") {
    check_keys(m, {"role", "content", "name", "tool_calls", "reasoning_content", "reasoning", "refusal"}, w);
  } else if (msg.role == "tool") {
    check_keys(m, {"role", "content", "tool_call_id", "id", "tool", "name"}, w);
  } else {
    bad(w + ".role", "unknown role \"" + msg.role + "\" (expected system, developer, user, assistant or tool)");
  }
  if (m.contains("content")) msg.content = parse_content(m["content"], w + ".content");
  if (msg.role != "tool") msg.name = optional_string(m, "name", w).value_or("");
  if (msg.role == "assistant") {
    if (m.contains("refusal") && !m["refusal"].is_null()) bad(w + ".refusal", "refusals cannot be rendered into a prompt");
    // `reasoning` is the other spelling K3's encoder accepts (reasoning_content wins).
    auto r = optional_string(m, "reasoning_content", w);
    if (!r || r->empty()) r = optional_string(m, "reasoning", w);
    msg.reasoning = r.value_or("");
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      const Json& tcs = m["tool_calls"];
      if (!tcs.is_array()) bad(w + ".tool_calls", "must be an array");
      if (tcs.size() > kMaxToolCalls) bad(w + ".tool_calls", "more than " + std::to_string(kMaxToolCalls) + " calls");
      for (size_t i = 0; i < tcs.size(); ++i) msg.tool_calls.push_back(parse_tool_call(tcs[i], w + ".tool_calls[" + std::to_string(i) + "]"));
    }
  }
  if (msg.role == "tool") {
    // The id of the call this answers (K3's encoder also reads "id").
    msg.tool_call_id = m.contains("tool_call_id") ? optional_string(m, "tool_call_id", w) : optional_string(m, "id", w);
    // encoding_k3.py: message.get("tool", message.get("name")).
    if (m.contains("tool")) msg.tool = optional_string(m, "tool", w);
    else msg.tool = optional_string(m, "name", w);
  }
  if (msg.role == "system" && m.contains("tools") && !m["tools"].is_null()) {
    if (!m["tools"].is_array()) bad(w + ".tools", "must be an array");
    // An empty list declares nothing: the message is an ordinary system message (as in the encoder).
    if (!m["tools"].empty()) msg.tools = m["tools"];
  }
  return msg;
}

void check_tools(const Json& tools, const std::string& w) {
  if (!tools.is_array()) bad(w, "must be an array");
  if (tools.size() > kMaxTools) bad(w, "more than " + std::to_string(kMaxTools) + " tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string tw = w + "[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) bad(tw, "must be an object");
    if (!t.contains("type") || t["type"] != "function") bad(tw + ".type", "only \"function\" tools are supported");
    if (!t.contains("function") || !t["function"].is_object()) bad(tw + ".function", "must be an object");
    const Json& f = t["function"];
    check_keys(t, {"type", "function"}, tw);
    check_keys(f, {"name", "description", "parameters", "strict"}, tw + ".function");
    if (!f.contains("name") || !f["name"].is_string()) bad(tw + ".function.name", "must be a string");
    check_function_name(f["name"].get<std::string>(), tw + ".function.name");
    // strict: true promises arguments that match the schema; only a forced call (tool_choice
    // required or named) is constrained, so the promise cannot be kept for every reply.
    if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
      bad(tw + ".function.description", "must be a string");
    if (f.contains("strict") && !f["strict"].is_null() && !f["strict"].is_boolean()) bad(tw + ".function.strict", "must be a boolean");
    if (f.contains("strict") && f["strict"].is_boolean() && f["strict"].get<bool>())
      bad(tw + ".function.strict", "strict function calling is not supported (use tool_choice required or a named function, which are enforced)");
    if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
      bad(tw + ".function.parameters", "must be a JSON schema object");
  }
}

}  // namespace

void check_json_depth(const Json& j, const std::string& where) {
  std::vector<std::pair<const Json*, size_t>> stack = {{&j, 1}};
  while (!stack.empty()) {
    auto [v, depth] = stack.back();
    stack.pop_back();
    if (depth > kMaxJsonDepth) bad(where, "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (v->is_structured())
      for (const Json& x : *v) stack.push_back({&x, depth + 1});
  }
}

const std::vector<std::string>& chat_request_fields() {
  static const std::vector<std::string> f = {"messages", "tools", "tool_choice", "response_format", "thinking",
                                             "thinking_effort", "reasoning_effort", "add_generation_prompt",
                                             "image_prompts", "parallel_tool_calls"};
  return f;
}

ChatRequest parse_chat_request(const Json& j) {
  if (!j.is_object()) bad("request", "must be a JSON object");
  check_json_depth(j, "request");
  ChatRequest r;
  if (!j.contains("messages")) bad("messages", "is required");
  const Json& ms = j["messages"];
  if (!ms.is_array()) bad("messages", "must be an array");
  if (ms.size() > kMaxMessages) bad("messages", "more than " + std::to_string(kMaxMessages) + " messages");
  for (size_t i = 0; i < ms.size(); ++i) r.messages.push_back(parse_message(ms[i], "messages[" + std::to_string(i) + "]"));

  if (j.contains("tools") && !j["tools"].is_null()) {
    check_tools(j["tools"], "tools");
    r.tools = j["tools"];
  }
  for (size_t i = 0; i < r.messages.size(); ++i)
    if (!r.messages[i].tools.is_null()) check_tools(r.messages[i].tools, "messages[" + std::to_string(i) + "].tools");

  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    const Json& tc = j["tool_choice"];
    r.tool_choice.given = true;
    if (tc.is_string()) {
      const std::string s = tc.get<std::string>();
      if (s == "auto") r.tool_choice.mode = ToolChoice::Mode::Auto;
      else if (s == "none") r.tool_choice.mode = ToolChoice::Mode::None;
      else if (s == "required") r.tool_choice.mode = ToolChoice::Mode::Required;
      else bad("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (tc.is_object() && tc.contains("function") && tc["function"].is_object() &&
               tc["function"].contains("name") && tc["function"]["name"].is_string()) {
      if (tc.contains("type") && tc["type"] != "function") bad("tool_choice.type", "must be \"function\"");
      r.tool_choice.mode = ToolChoice::Mode::Named;
      r.tool_choice.name = tc["function"]["name"].get<std::string>();
    } else {
      bad("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (r.tool_choice.mode == ToolChoice::Mode::Required || r.tool_choice.mode == ToolChoice::Mode::Named) {
      if (r.tools.is_null() || r.tools.empty()) bad("tool_choice", "needs tools to choose from");
    }
    if (r.tool_choice.mode == ToolChoice::Mode::Named) {
      const auto names = declared_tool_names(r);
      if (std::find(names.begin(), names.end(), r.tool_choice.name) == names.end())
        bad("tool_choice.function.name", "\"" + r.tool_choice.name + "\" is not a declared tool");
    }
  }
  if (j.contains("parallel_tool_calls") && !j["parallel_tool_calls"].is_null() && !j["parallel_tool_calls"].is_boolean())
    bad("parallel_tool_calls", "must be a boolean");

  if (j.contains("response_format") && !j["response_format"].is_null()) {
    const Json& rf = j["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      bad("response_format", "must be an object with a string \"type\"");
    const std::string type = rf["type"].get<std::string>();
    if (type == "text") {
      check_keys(rf, {"type"}, "response_format");
    } else if (type == "json_object") {
      check_keys(rf, {"type"}, "response_format");
      r.response_format.type = ResponseFormat::Type::JsonObject;
    } else if (type == "json_schema") {
      check_keys(rf, {"type", "json_schema"}, "response_format");
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        bad("response_format.json_schema", "must be an object");
      const Json& js = rf["json_schema"];
      // OpenAI's wrapper {name, description, schema, strict}; without "schema" the object is
      // the schema itself (as K3's encoder reads it).
      if (js.contains("schema")) {
        const std::string w = "response_format.json_schema";
        check_keys(js, {"name", "description", "schema", "strict"}, w);
        for (const char* k : {"name", "description"})
          if (js.contains(k) && !js[k].is_null() && !js[k].is_string()) bad(w + "." + k, "must be a string");
        // The schema is always enforced, so either value of strict is kept; it must be one.
        if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean()) bad(w + ".strict", "must be a boolean");
      }
      r.response_format.type = ResponseFormat::Type::JsonSchema;
      // encoding_k3.py: json_schema.get("schema", json_schema.get("json_schema", json_schema)).
      if (js.contains("schema")) r.response_format.schema = js["schema"];
      else if (js.contains("json_schema")) r.response_format.schema = js["json_schema"];
      else r.response_format.schema = js;
      if (!r.response_format.schema.is_object() && !r.response_format.schema.is_boolean())
        bad("response_format.json_schema.schema", "must be a JSON schema object");
    } else {
      bad("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }

  if (j.contains("thinking") && !j["thinking"].is_null()) {
    const Json& t = j["thinking"];
    // A boolean (K3's encoder), or {"type": "enabled"|"disabled"} as some Kimi clients send.
    if (t.is_boolean()) r.thinking = t.get<bool>();
    else if (t.is_object() && t.contains("type") && (t["type"] == "enabled" || t["type"] == "disabled")) {
      check_keys(t, {"type"}, "thinking");
      r.thinking = t["type"] == "enabled";
    }
    else bad("thinking", "must be a boolean (or {\"type\": \"enabled\" | \"disabled\"})");
    r.thinking_given = true;
  }
  const std::vector<std::string> efforts = {"low", "high", "max"};
  if (j.contains("thinking_effort") && !j["thinking_effort"].is_null()) {
    r.thinking_effort = need_string(j["thinking_effort"], "thinking_effort");
  }
  if (j.contains("reasoning_effort") && !j["reasoning_effort"].is_null()) {
    const std::string e = need_string(j["reasoning_effort"], "reasoning_effort");
    std::string mapped;
    if (e == "none") {
      if (r.thinking_given && r.thinking) bad("reasoning_effort", "\"none\" contradicts thinking: true");
      r.thinking = false;
      r.thinking_given = true;
    } else if (e == "minimal" || e == "low") {
      mapped = "low";
    } else if (e == "medium") {
      mapped = "";  // the model's own default: K3 has no medium level
    } else if (e == "high" || e == "max") {
      mapped = e;
    } else {
      bad("reasoning_effort", "must be none, minimal, low, medium, high or max");
    }
    if (!r.thinking_effort.empty() && e != "none" && mapped != r.thinking_effort)
      bad("reasoning_effort", "contradicts thinking_effort \"" + r.thinking_effort + "\"");
    if (r.thinking_effort.empty() && e != "none") r.thinking_effort = mapped;
  }
  // Checked once thinking is settled (reasoning_effort "none" may turn it off): encoding_k3.py
  // accepts exactly these when thinking (its note text also names `medium`, its check does not).
  if (r.thinking && !r.thinking_effort.empty() &&
      std::find(efforts.begin(), efforts.end(), r.thinking_effort) == efforts.end())
    bad("thinking_effort", "\"" + r.thinking_effort + "\" is not supported (expected low, high or max)");
  if (j.contains("add_generation_prompt") && !j["add_generation_prompt"].is_null()) {
    if (!j["add_generation_prompt"].is_boolean()) bad("add_generation_prompt", "must be a boolean");
    r.add_generation_prompt = j["add_generation_prompt"].get<bool>();
  }
  if (j.contains("image_prompts") && !j["image_prompts"].is_null()) {
    const Json& ip = j["image_prompts"];
    if (!ip.is_array()) bad("image_prompts", "must be an array of strings");
    std::vector<std::string> prompts;
    for (size_t i = 0; i < ip.size(); ++i) prompts.push_back(need_string(ip[i], "image_prompts[" + std::to_string(i) + "]"));
    r.image_prompts = std::move(prompts);
  }
  return r;
}

std::vector<std::string> declared_tool_names(const ChatRequest& r) {
  std::vector<std::string> names;
  auto add = [&](const Json& tools) {
    if (!tools.is_array()) return;
    for (const Json& t : tools)
      if (t.is_object() && t.contains("function") && t["function"].contains("name") && t["function"]["name"].is_string())
        names.push_back(t["function"]["name"].get<std::string>());
  };
  add(r.tools);
  for (const Message& m : r.messages) add(m.tools);
  return names;
}

}  // namespace waste::chat
