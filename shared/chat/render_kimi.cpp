// The Kimi chat format of K2 and Kimi-Linear (their chat_template.jinja; MODELS.md section 5):
//   [tools]    <|im_system|>tool_declare<|im_middle|>{tools, compact JSON, client's key order}<|im_end|>
//   [default]  <|im_system|>system<|im_middle|>{default system message}<|im_end|>  (first message not system)
//   message    <|im_user|> / <|im_assistant|> / <|im_system|> {name or role}<|im_middle|>{content}<|im_end|>
//   tool calls after an assistant's content:
//              <|tool_calls_section_begin|>(<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>)*<|tool_calls_section_end|>
//   tool       <|im_system|>tool<|im_middle|>## Return of {call id}\n{content}<|im_end|>
//   generation <|im_assistant|>assistant<|im_middle|>
// Call ids: K2 was trained on `functions.NAME:IDX`, IDX counting every call of the conversation
// from 0. A client's id of that form is kept; any other (OpenAI's call_...) is rendered as
// functions.NAME:IDX, and a tool result naming it by tool_call_id gets the same rendered id.
// Earlier turns' reasoning is not rendered: the K2 templates drop it from the history.
#include <map>

#include "shared/chat/render.h"

namespace waste::chat {

namespace {

// functions.NAME:IDX (NAME without ':', IDX decimal). A scan, not std::regex: libstdc++'s
// matcher recurses per character and a client's id could overflow the stack.
bool is_kimi_call_id(const std::string& id) {
  const std::string prefix = "functions.";
  if (id.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t colon = id.find(':', prefix.size());
  if (colon == std::string::npos || colon == prefix.size() || colon + 1 == id.size()) return false;
  for (size_t i = colon + 1; i < id.size(); ++i)
    if (id[i] < '0' || id[i] > '9') return false;
  return true;
}

void content(std::vector<Segment>& out, const std::vector<ContentPart>& parts, const std::string& where) {
  for (const ContentPart& p : parts) {
    if (p.kind == ContentPart::Kind::Image)
      throw RequestError(where, "image input is not supported by the kimi chat format (this model has no vision tower)");
    if (!p.text.empty()) out.push_back({p.text, false});
  }
}

}  // namespace

std::vector<Segment> render_kimi(const ChatRequest& r, const RenderOptions& o) {
  std::vector<Segment> out;
  auto markup = [&](const char* s) { out.push_back({s, true}); };
  auto text = [&](const std::string& s) {
    if (!s.empty()) out.push_back({s, false});
  };
  if (r.thinking_given && r.thinking) throw RequestError("thinking", "the kimi chat format has no thinking channel");
  if (!r.thinking_effort.empty()) throw RequestError("thinking_effort", "the kimi chat format has no thinking channel");
  if (r.image_prompts) throw RequestError("image_prompts", "the kimi chat format takes no image prompts");

  auto header = [&](const char* open, const std::string& role) {
    markup(open);
    text(role);
    markup("<|im_middle|>");
  };
  if (!o.continuation && r.tools.is_array() && !r.tools.empty()) {
    header("<|im_system|>", "tool_declare");
    text(py_dumps(r.tools, {.compact = true}));
    markup("<|im_end|>");
  }
  if (!o.continuation && !o.default_system_message.empty() &&
      (r.messages.empty() || r.messages.front().role != "system")) {
    header("<|im_system|>", "system");
    text(o.default_system_message);
    markup("<|im_end|>");
  }
  std::map<std::string, std::string> rendered_id;  // client's call id -> the id rendered
  size_t call_index = 0;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const Message& m = r.messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (m.role == "system" && !m.tools.is_null())
      throw RequestError(where + ".tools", "the kimi chat format declares tools only in the request's \"tools\"");
    const std::string role_name = m.name.empty() ? m.role : m.name;
    header(m.role == "user" ? "<|im_user|>" : m.role == "assistant" ? "<|im_assistant|>" : "<|im_system|>",
           m.role == "tool" ? (m.tool ? *m.tool : std::string("tool")) : role_name);
    if (m.role == "tool") {
      std::string id = m.tool_call_id.value_or("");
      if (auto it = rendered_id.find(id); it != rendered_id.end()) id = it->second;
      std::string body = "## Return of " + id + "\n";
      for (const ContentPart& p : m.content) {
        if (p.kind == ContentPart::Kind::Image)
          throw RequestError(where + ".content", "image input is not supported by the kimi chat format");
        body += p.text;
      }
      text(body);
    } else {
      content(out, m.content, where + ".content");
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      markup("<|tool_calls_section_begin|>");
      for (const ToolCall& c : m.tool_calls) {
        std::string id = c.id && is_kimi_call_id(*c.id) ? *c.id : "functions." + c.name + ":" + std::to_string(call_index);
        if (c.id) rendered_id[*c.id] = id;
        ++call_index;
        markup("<|tool_call_begin|>");
        text(id);
        markup("<|tool_call_argument_begin|>");
        text(c.arguments.empty() ? "{}" : c.arguments);
        markup("<|tool_call_end|>");
      }
      markup("<|tool_calls_section_end|>");
    }
    markup("<|im_end|>");
  }
  if (r.add_generation_prompt) header("<|im_assistant|>", "assistant");
  return out;
}

}  // namespace waste::chat
