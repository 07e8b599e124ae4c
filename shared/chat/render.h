// Chat requests rendered into prompt segments, per chat format. A segment is either markup (the
// renderer's own: special tokens, and for images a whole media prompt) or text, which is
// tokenized on its own as ordinary text, never merged with its neighbours and never able to
// produce a special id, whoever wrote it (user, document, tool).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shared/chat/chat_request.h"
#include "shared/tokenizer/tokenizer.h"

namespace waste::chat {

struct Segment {
  std::string text;
  bool markup = false;
  bool operator==(const Segment&) const = default;
};

struct RenderOptions {
  // Kimi: the system message inserted when the conversation does not start with one.
  std::string default_system_message;
  // The messages continue a conversation the session already holds: no default system message.
  bool continuation = false;
};

// An XTML attribute value as K3's encoder writes it (& -> &amp;, " -> &quot;); the reply
// constraint spells forced tool names with it so the parser reads them back.
std::string escape_attr(const std::string& value);

// K3 ("XTML"), following the rules of the release's encoding_k3.py (docs/TOKENIZER.md).
std::vector<Segment> render_k3(const ChatRequest& r, const RenderOptions& o = {});
// Kimi K2 / Kimi-Linear (<|im_user|> ...), with K2's documented tool markup.
std::vector<Segment> render_kimi(const ChatRequest& r, const RenderOptions& o = {});
// By format; throws Error for ChatFormat::None.
std::vector<Segment> render_prompt(tok::ChatFormat f, const ChatRequest& r, const RenderOptions& o = {});

// Segments -> ids: markup through the tokenizer's special names (every special a markup segment
// names must exist), text as plain text, each segment alone.
std::vector<uint32_t> encode_segments(const tok::Tokenizer& t, const std::vector<Segment>& segs);

// The prompt of a request for a tokenizer: its chat format, its default system message, BOS
// when the tokenizer asks for one (not for a continuation).
std::vector<uint32_t> encode_prompt(const tok::Tokenizer& t, const ChatRequest& r, bool continuation = false);

// Joined into one string (markup written as its token text), for display.
std::string segments_text(const std::vector<Segment>& segs);

// The simplest request: these messages, as {role, content} pairs.
ChatRequest simple_chat(const std::vector<std::pair<std::string, std::string>>& messages);

}  // namespace waste::chat
