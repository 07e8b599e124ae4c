// K3's prompt format ("XTML"): elements <|open|>TAG ATTRS<|sep|>BODY<|close|>TAG<|sep|>. The
// rules are those of the release's encoder (encoding_k3.py), checked against its own output in
// ../shared/chat/k3/cases.jsonl:
//   - every structural token is its own markup segment; tag names, attribute names, `="`, the
//     escaped value and `"` are separate text segments; empty texts are dropped;
//   - tools declared first (compact JSON, keys sorted), then the thinking-effort note, then the
//     messages, then the tool-choice and response-format notes, then the generation prompt;
//   - an assistant turn has a think element (thinking on) and a response element, then its
//     tool calls as typed `argument` elements (a raw `json` element when the arguments do not
//     parse); tool results are numbered by the position of the call they answer, and a run of
//     results that all match calls by id is put in call order.
#include <algorithm>
#include <map>

#include "shared/chat/render.h"
#include "shared/tokenizer/utf8.h"

namespace waste::chat {

namespace {

constexpr const char* kOpen = "<|open|>";
constexpr const char* kClose = "<|close|>";
constexpr const char* kSep = "<|sep|>";
constexpr const char* kEndOfMsg = "<|end_of_msg|>";
constexpr const char* kImagePlaceholder = "<|kimi_image_placeholder|>";

using Attrs = std::vector<std::pair<std::string, std::string>>;

}  // namespace

std::string escape_attr(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

namespace {

class Writer {
 public:
  explicit Writer(const std::optional<std::vector<std::string>>& image_prompts) : image_prompts_(image_prompts) {}

  void markup(const std::string& s) {
    if (!s.empty()) out_.push_back({s, true});
  }
  void text(const std::string& s) {
    if (!s.empty()) out_.push_back({s, false});
  }
  // Text that may hold image placeholders: with image prompts, each placeholder becomes the
  // next image's prompt; without, it stays text.
  void content_text(const std::string& s) {
    if (s.empty()) return;
    if (!image_prompts_ || s.find(kImagePlaceholder) == std::string::npos) return text(s);
    const std::string ph = kImagePlaceholder;
    size_t from = 0;
    for (;;) {
      const size_t at = s.find(ph, from);
      text(s.substr(from, at == std::string::npos ? std::string::npos : at - from));
      if (at == std::string::npos) break;
      markup(next_image());
      from = at + ph.size();
    }
  }
  std::string next_image() {
    if (!image_prompts_) return kImagePlaceholder;
    if (image_index_ >= image_prompts_->size()) throw RequestError("image_prompts", "more images than image prompts");
    return (*image_prompts_)[image_index_++];
  }
  void content(const std::vector<ContentPart>& parts) {
    for (const ContentPart& p : parts) {
      if (p.kind == ContentPart::Kind::Image) markup(next_image());
      else content_text(p.text);
    }
  }
  void open(const std::string& tag, const Attrs& attrs = {}) {
    markup(kOpen);
    text(tag);
    for (const auto& [k, v] : attrs) {
      text(" " + k);
      text("=\"");
      text(escape_attr(v));
      text("\"");
    }
    markup(kSep);
  }
  void close(const std::string& tag) {
    markup(kClose);
    text(tag);
    markup(kSep);
  }
  void end_of_msg() { markup(kEndOfMsg); }
  void internal_system_message(const std::string& type, const std::string& body) {
    open("message", {{"role", "system"}, {"type", type}});
    text(strip(body));
    close("message");
    end_of_msg();
  }
  void check_images_consumed() const {
    if (image_prompts_ && image_index_ != image_prompts_->size())
      throw RequestError("image_prompts", std::to_string(image_prompts_->size()) + " image prompts for " +
                                              std::to_string(image_index_) + " images");
  }
  std::vector<Segment> take() { return std::move(out_); }

  // Python's str.strip(): Unicode whitespace (tok::python_isspace) off both ends.
  static std::string strip(const std::string& s) {
    if (tok::utf8_invalid_offset(s) != std::string::npos) return s;  // the tokenizer refuses it later
    size_t begin = s.size(), end = 0;
    for (size_t i = 0; i < s.size();) {
      const size_t at = i;
      if (!tok::python_isspace(tok::utf8_next(s, i))) {
        begin = std::min(begin, at);
        end = i;
      }
    }
    return begin < end ? s.substr(begin, end - begin) : std::string();
  }

 private:
  const std::optional<std::vector<std::string>>& image_prompts_;
  size_t image_index_ = 0;
  std::vector<Segment> out_;
};

const char* xtml_type(const Json& v) {
  switch (v.type()) {
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::null: return "null";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "number";
    case Json::value_t::string: return "string";
    case Json::value_t::object: return "object";
    default: return "array";
  }
}

bool blank(const std::string& s) { return Writer::strip(s).empty(); }

void tool_declare(Writer& w, const Json& tools, bool dynamic) {
  const std::string json = py_dumps(tools, {.compact = true, .sort_keys = true});
  const std::string body = dynamic ? "## New Tools Available\n"
                                     "The system dynamically extends the toolset via lazy-loading.\n"
                                     "You have access to all existing and extended tools.\n"
                                     "Here are the specs for the extended tools.\n\n"
                                     "```json\n" + json + "\n```"
                                   : "# Tools\n"
                                     "Here are the available tools, described in JSONSchema.\n\n"
                                     "```json\n" + json + "\n```";
  w.open("message", {{"role", "system"}, {"type", "tool-declare"}});
  w.text(body);
  w.close("message");
  w.end_of_msg();
}

void tool_calls(Writer& w, const std::vector<ToolCall>& calls, const std::string& where) {
  w.open("tools");
  for (size_t i = 0; i < calls.size(); ++i) {
    const ToolCall& c = calls[i];
    w.open("call", {{"tool", c.name}, {"index", std::to_string(i + 1)}});
    if (!blank(c.arguments)) {
      Json args = Json::parse(c.arguments, nullptr, false);
      if (!args.is_discarded()) check_json_depth(args, where + "[" + std::to_string(i) + "].function.arguments");
      if (args.is_discarded()) {
        // Arguments that are not JSON keep their text, unrepaired.
        w.open("json", {{"type", "object"}});
        w.content_text(c.arguments);
        w.close("json");
      } else {
        if (!args.is_object())
          throw RequestError(where + "[" + std::to_string(i) + "].function.arguments", "must be a JSON object");
        for (auto it = args.begin(); it != args.end(); ++it) {
          w.open("argument", {{"key", it.key()}, {"type", xtml_type(it.value())}});
          w.content_text(it.value().is_string() ? it.value().get<std::string>() : py_dumps(it.value()));
          w.close("argument");
        }
      }
    }
    w.close("call");
  }
  w.close("tools");
}

// Each run of consecutive tool results that all answer calls of the latest assistant turn by
// id, put in call order and named after the call they answer (encoding_k3.py's
// normalize_xtml_tool_result_messages). A run with any unmatched result stays as it came.
std::vector<const Message*> order_tool_results(const std::vector<Message>& ms, std::vector<Message>& renamed) {
  std::vector<const Message*> out;
  renamed.reserve(ms.size());  // pointers into it stay valid
  std::map<std::string, std::pair<size_t, std::string>> calls;  // id -> (1-based position, name)
  for (size_t i = 0; i < ms.size();) {
    const Message& m = ms[i];
    if (m.role == "assistant") {
      calls.clear();
      for (size_t k = 0; k < m.tool_calls.size(); ++k)
        if (m.tool_calls[k].id) calls.emplace(*m.tool_calls[k].id, std::make_pair(k + 1, m.tool_calls[k].name));
    }
    if (m.role != "tool") {
      out.push_back(&m);
      ++i;
      continue;
    }
    struct Item {
      size_t position, offset;
      const Message* m;
      std::string name;
    };
    std::vector<Item> run;
    bool unresolved = false;
    for (; i < ms.size() && ms[i].role == "tool"; ++i) {
      const Message& t = ms[i];
      auto it = t.tool_call_id ? calls.find(*t.tool_call_id) : calls.end();
      if (it == calls.end()) {
        unresolved = true;
        run.push_back({0, run.size(), &t, ""});
      } else {
        run.push_back({it->second.first, run.size(), &t, it->second.second});
      }
    }
    if (!unresolved)
      std::stable_sort(run.begin(), run.end(), [](const Item& a, const Item& b) { return a.position < b.position; });
    for (const Item& item : run) {
      if (unresolved) {
        out.push_back(item.m);
        continue;
      }
      renamed.push_back(*item.m);
      renamed.back().tool = item.name;
      out.push_back(&renamed.back());
    }
  }
  return out;
}

}  // namespace

std::vector<Segment> render_k3(const ChatRequest& r, const RenderOptions& o) {
  Writer w(r.image_prompts);
  if (!o.continuation && r.tools.is_array() && !r.tools.empty()) tool_declare(w, r.tools, false);
  if (r.thinking && !r.thinking_effort.empty())
    w.internal_system_message("thinking-effort",
                              "`thinking_effort` guides on how much to think in your thinking channel (not including "
                              "the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
                              "Now the system is invoked with `thinking_effort=" + r.thinking_effort + "`.");

  std::vector<Message> renamed;
  const std::vector<const Message*> messages = order_tool_results(r.messages, renamed);
  const std::vector<ToolCall>* last_calls = nullptr;  // of the latest assistant turn
  size_t tool_index = 0;
  for (size_t mi = 0; mi < messages.size(); ++mi) {
    const Message& m = *messages[mi];
    if (m.role == "user" || (m.role == "system" && m.tools.is_null())) {
      Attrs attrs = {{"role", m.role}};
      if (!m.name.empty()) attrs.push_back({"name", m.name});
      w.open("message", attrs);
      w.content(m.content);
      w.close("message");
      w.end_of_msg();
    } else if (m.role == "system") {
      if (!m.tools.empty()) tool_declare(w, m.tools, true);
    } else if (m.role == "tool") {
      ++tool_index;
      std::optional<std::string> name = m.tool;
      if (!name && last_calls && tool_index <= last_calls->size()) name = (*last_calls)[tool_index - 1].name;
      if (!name)
        throw RequestError("messages", "a tool result needs a tool name: give \"tool\" or \"name\", or a tool_call_id "
                                       "of an earlier assistant tool call");
      w.open("message", {{"role", "tool"}, {"tool", *name}, {"index", std::to_string(tool_index)}});
      w.content(m.content);
      w.close("message");
      w.end_of_msg();
    } else if (m.role == "assistant") {
      last_calls = &m.tool_calls;
      tool_index = 0;
      Attrs attrs = {{"role", "assistant"}};
      if (!m.name.empty()) attrs.push_back({"name", m.name});
      w.open("message", attrs);
      // The think channel is structural: with thinking on every assistant turn has one.
      if (r.thinking) {
        w.open("think");
        if (!blank(m.reasoning)) w.content_text(m.reasoning);
        w.close("think");
      }
      w.open("response");
      w.content(m.content);
      w.close("response");
      if (!m.tool_calls.empty()) tool_calls(w, m.tool_calls, "messages[" + std::to_string(mi) + "].tool_calls");
      w.close("message");
      w.end_of_msg();
    }
  }

  if (r.tool_choice.mode == ToolChoice::Mode::Required)
    w.internal_system_message("tool-choice",
                              "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
  else if (r.tool_choice.mode == ToolChoice::Mode::None && r.tool_choice.given)
    w.internal_system_message("tool-choice",
                              "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
  if (r.response_format.type == ResponseFormat::Type::JsonObject)
    w.internal_system_message("response-format",
                              "The system is invoked with `response_format=json_object`.\n"
                              "Your response must be raw JSON data without markdown code blocks (```json) or any "
                              "additional formatting.");
  else if (r.response_format.type == ResponseFormat::Type::JsonSchema)
    w.internal_system_message("response-format",
                              "The system is invoked with `response_format=json_schema`.\n"
                              "Your response must be raw JSON data without markdown code blocks (```json) or any "
                              "additional formatting.\nThe JSON data must match the following schema:\n```json\n" +
                                  py_dumps(r.response_format.schema, {.compact = true, .sort_keys = true}) + "\n```");
  if (r.add_generation_prompt) {
    w.open("message", {{"role", "assistant"}});
    w.open(r.thinking ? "think" : "response");
  }
  w.check_images_consumed();
  return w.take();
}

}  // namespace waste::chat
