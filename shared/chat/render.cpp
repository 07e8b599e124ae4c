#include "shared/chat/render.h"

namespace waste::chat {

std::vector<Segment> render_prompt(tok::ChatFormat f, const ChatRequest& r, const RenderOptions& o) {
  switch (f) {
    case tok::ChatFormat::K3: return render_k3(r, o);
    case tok::ChatFormat::Kimi: return render_kimi(r, o);
    case tok::ChatFormat::None: break;
  }
  throw Error("chat: this tokenizer has no chat format (chat_format \"none\")");
}

std::vector<uint32_t> encode_segments(const tok::Tokenizer& t, const std::vector<Segment>& segs) {
  std::vector<uint32_t> out;
  for (const Segment& s : segs) {
    if (!s.markup) {
      t.encode_append(s.text, out);
      continue;
    }
    // A markup segment is one special token, or a media prompt mixing specials and text.
    if (auto id = t.special_id(s.text)) {
      out.push_back(*id);
      continue;
    }
    if (s.text.rfind("<|", 0) == 0 && s.text.size() > 4 && s.text.find("<|", 2) == std::string::npos &&
        s.text.compare(s.text.size() - 2, 2, "|>") == 0)
      throw Error("chat: the tokenizer has no special token " + s.text + " needed by the chat format");
    const auto ids = t.encode_markup(s.text);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::vector<uint32_t> encode_prompt(const tok::Tokenizer& t, const ChatRequest& r, bool continuation) {
  RenderOptions o;
  o.default_system_message = t.config().default_system_message;
  o.continuation = continuation;
  std::vector<uint32_t> out;
  if (!continuation && t.config().add_bos && t.config().bos_id) out.push_back(*t.config().bos_id);
  const auto ids = encode_segments(t, render_prompt(t.config().chat_format, r, o));
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::string segments_text(const std::vector<Segment>& segs) {
  std::string s;
  for (const Segment& x : segs) s += x.text;
  return s;
}

ChatRequest simple_chat(const std::vector<std::pair<std::string, std::string>>& messages) {
  ChatRequest r;
  for (const auto& [role, text] : messages) {
    Message m;
    m.role = role == "developer" ? "system" : role;
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw RequestError("role", "unknown role \"" + role + "\" (expected system, user, assistant or tool)");
    if (!text.empty()) m.content.push_back({ContentPart::Kind::Text, text, {}});
    r.messages.push_back(std::move(m));
  }
  return r;
}

}  // namespace waste::chat
