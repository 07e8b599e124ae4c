// Chat templates as a list of segments: special-token markup (by name) and ordinary text. The
// tokenizer turns markup into special ids and encodes the text as plain text, so a message that
// contains "<|im_end|>" can never close its own turn.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "shared/tokenizer/tokenizer_config.h"

namespace waste::tok {

struct ChatMessage {
  std::string role;     // system, user, assistant, tool
  std::string content;
  std::string tool_call_id;  // for role "tool" (Kimi: "## Return of {id}\n" prefix)
};

struct ChatSegment {
  bool special = false;  // true: `text` is a special token name
  std::string text;
};

// Kimi (K2, K2.5, Kimi-Linear):
//   [default system]  <|im_system|>system<|im_middle|>{default}<|im_end|>   (first message not system)
//   {role} message    <|im_{system|user|assistant}|>{role}<|im_middle|>{content}<|im_end|>
//   tool message      <|im_system|>tool<|im_middle|>## Return of {id}\n{content}<|im_end|>
//   generation prompt <|im_assistant|>assistant<|im_middle|>
// K3 (provisional, see docs/TOKENIZER.md):
//   {role} message    <|open|>{role}<|sep|>{content}<|end_of_msg|>
//   generation prompt <|open|>assistant<|sep|>
// Throws Error for an unknown role or ChatFormat::None.
std::vector<ChatSegment> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt, std::string_view default_system_message);

// The segments joined into one string (markup written as its token text), for display.
std::string chat_segments_text(const std::vector<ChatSegment>& segments);

}  // namespace waste::tok
