#include "shared/tokenizer/chat_format.h"

#include "shared/util/error.h"

namespace waste::tok {

namespace {

void kimi_message(std::vector<ChatSegment>& out, const std::string& role, const std::string& content,
                  const std::string& tool_call_id) {
  const char* open = nullptr;
  std::string body = content;
  if (role == "system" || role == "tool") {
    open = "<|im_system|>";
    if (role == "tool") body = "## Return of " + tool_call_id + "\n" + content;
  } else if (role == "user") {
    open = "<|im_user|>";
  } else if (role == "assistant") {
    open = "<|im_assistant|>";
  } else {
    throw Error("chat: unknown role '" + role + "' (expected system, user, assistant or tool)");
  }
  out.push_back({true, open});
  out.push_back({false, role});
  out.push_back({true, "<|im_middle|>"});
  if (!body.empty()) out.push_back({false, body});
  out.push_back({true, "<|im_end|>"});
}

void k3_message(std::vector<ChatSegment>& out, const std::string& role, const std::string& content) {
  if (role != "system" && role != "user" && role != "assistant" && role != "tool")
    throw Error("chat: unknown role '" + role + "' (expected system, user, assistant or tool)");
  out.push_back({true, "<|open|>"});
  out.push_back({false, role});
  out.push_back({true, "<|sep|>"});
  if (!content.empty()) out.push_back({false, content});
  out.push_back({true, "<|end_of_msg|>"});
}

}  // namespace

std::vector<ChatSegment> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt, std::string_view default_system_message) {
  std::vector<ChatSegment> out;
  switch (format) {
    case ChatFormat::None:
      throw Error("chat: this tokenizer has no chat format (chat_format \"none\")");
    case ChatFormat::Kimi:
      if (!default_system_message.empty() && (messages.empty() || messages.front().role != "system"))
        kimi_message(out, "system", std::string(default_system_message), "");
      for (const ChatMessage& m : messages) kimi_message(out, m.role, m.content, m.tool_call_id);
      if (add_generation_prompt) {
        out.push_back({true, "<|im_assistant|>"});
        out.push_back({false, "assistant"});
        out.push_back({true, "<|im_middle|>"});
      }
      break;
    case ChatFormat::K3:
      if (!default_system_message.empty() && (messages.empty() || messages.front().role != "system"))
        k3_message(out, "system", std::string(default_system_message));
      for (const ChatMessage& m : messages) k3_message(out, m.role, m.content);
      if (add_generation_prompt) {
        out.push_back({true, "<|open|>"});
        out.push_back({false, "assistant"});
        out.push_back({true, "<|sep|>"});
      }
      break;
  }
  return out;
}

std::string chat_segments_text(const std::vector<ChatSegment>& segments) {
  std::string s;
  for (const ChatSegment& seg : segments) s += seg.text;
  return s;
}

}  // namespace waste::tok
