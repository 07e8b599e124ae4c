// Reply parsers: the token ids a model generates -> reasoning, content and OpenAI tool calls,
// incrementally (one id at a time) for streaming, per chat format.
//
// Structure is decided by the TOKEN ID the model emitted, never by text: a model that writes the
// characters "<|sep|>" as ordinary tokens gets ordinary text. Special ids never reach `content` or
// `reasoning` as text. Text is valid UTF-8 in every delta: bytes of a character split across
// tokens are held until it completes, bytes that can never form a character become U+FFFD.
//
// Invariant: concatenating all deltas (every push() and finish()) field by field equals reply()
// after finish(): reasoning, content, and per tool call (by index) the id, the name and the
// arguments pieces. Both are written by one sink (reply_sink.h), so they cannot drift apart.
//
// push() and finish() never throw: malformed replies degrade by the rules below.
//
// == K3 ("XTML") =============================================================================
// Element: <|open|> header <|sep|> body <|close|> name <|sep|>. The header is ordinary text,
// `name key="value" ...` (values unescape &quot; &amp; &lt; &gt; &apos;; single-quoted and bare
// values are accepted too). The prompt already opened `message role="assistant"` and `think`
// (options.thinking) or `response`; the reply starts inside that element.
//   think    -> reasoning          response -> content
//   tools    -> holds calls        call tool="NAME" -> one tool call, id = call_id_prefix + 1, 2, ...
//   argument key="K" type="T"      -> one member of the call's JSON object arguments
//        T string: the body is the raw string (streamed, escaped, as the model writes it);
//        T number/boolean/null/object/array (or missing/unknown): the body is JSON text, held
//        until the element closes and checked; text that does not parse becomes a JSON string.
//   json     -> the body is the call's arguments verbatim (a "raw-arguments call", even if not JSON)
// A call with no argument/json child has arguments "{}".
// Degrade rules (K3):
//  - Cut at finish() (max_tokens, cancel): every open element is closed. A cut string argument is
//    closed ("...") and the object closed; a cut held value / cut json element gets the closing
//    quotes/brackets it lacks when that makes valid JSON (a dangling key gets null), else a held
//    value becomes a JSON string and a json element stays raw. An unfinished header is dropped.
//  - <|close|>NAME<|sep|>: closes the innermost open element named NAME and, implicitly, every
//    element inside it. A close for nothing open, or a name that does not parse, is ignored.
//    An element closed implicitly (or cut) is finalized like a cut one; an explicitly closed
//    json element is never altered.
//  - <|open|>response / tools / think closes everything open below the message first (so a
//    reply that opens response while still inside think, or skips think, works). A second
//    think/response element appends to reasoning/content.
//  - <|open|>call closes everything open below the innermost tools element (or the message):
//    a call needs no tools wrapper; an unclosed previous call/argument is closed implicitly.
//  - argument/json: only directly inside a call (an unclosed previous argument is closed
//    implicitly); elsewhere they are dropped with their body. In one call the first child decides:
//    after an argument, json elements are dropped; after a json element, everything is dropped.
//  - A call header without a parsable tool="..." attribute, an argument without key="...", calls
//    beyond kMaxToolCalls: dropped with their bodies.
//  - Unknown element names and headers that do not parse: the element is transparent (its markup
//    is dropped, its body goes where its parent's text goes).
//  - Text inside tools or call but outside argument/json: dropped. Text directly inside the message
//    (after response closed, before think...) is content, except whitespace between elements,
//    which is dropped.
//  - <|close|>message, <|end_of_msg|> or <|open|>message (a new turn) end the reply: everything
//    after them is dropped.
//  - Specials where text is expected (<|sep|> in a body, media, [BOS], [EOS], [UNK], reserved,
//    anything unnamed) are dropped. <|open|>/<|close|> inside an unfinished header abandon it.
//  - Bounds: a header longer than kMaxHeaderBytes stops being markup: the <|open|> is dropped and
//    the header text goes to the enclosing element as ordinary text (a close name longer than
//    kMaxCloseNameBytes likewise); at most kMaxDepth open elements (deeper opens are dropped);
//    a held argument value longer than kMaxHeldValueBytes is streamed as a JSON string instead.
//
// == Kimi (K2, K2.5 line, Kimi-Linear) ========================================================
// Content is plain text; <think>...</think> is reasoning when the tokenizer has those specials
// (options.thinking is not used: the model opens <think> itself). Tool calls:
//   <|tool_calls_section_begin|> (<|tool_call_begin|> functions.NAME:IDX <|tool_call_argument_begin|>
//   JSON <|tool_call_end|>)* <|tool_calls_section_end|>
// id = the trimmed `functions.NAME:IDX` text, name = NAME; the JSON text is streamed verbatim.
// Degrade rules (Kimi):
//  - A missing `functions.` prefix or `:IDX` suffix is tolerated (without `:IDX` the id gets
//    `:K`, K the call's 0-based position in this reply); an id repeated in the reply gets `_K`.
//    An empty or over-long (> kMaxKimiNameBytes) name drops the call and its arguments.
//  - <|tool_call_begin|> outside a section opens one implicitly; a new <|tool_call_begin|>,
//    <|tool_calls_section_end|> or <|im_end|> closes an unclosed call. A call ended before
//    <|tool_call_argument_begin|>, or with empty arguments, gets "{}"; a call cut by finish()
//    before <|tool_call_argument_begin|> is dropped (its name may be cut too). Arguments cut by
//    finish() (or ended implicitly) get the closing quotes/brackets they lack when that makes
//    valid JSON, else stay raw; explicitly ended arguments are verbatim, even if not JSON.
//  - Text between calls is dropped; text after the section is content.
//  - <|tool_calls_section_begin|> or <|tool_call_begin|> inside <think> closes the think.
//    Specials out of place (</think> outside think, <think> inside it, <|tool_calls_section_end|>
//    or <|tool_call_end|> outside a section/call, <|tool_call_argument_begin|> outside a call
//    name, media, [BOS], [EOS], reserved, ...) are dropped.
//  - <|im_end|> or the start of a new turn (<|im_user|>, <|im_assistant|>, <|im_system|>) ends the
//    reply; everything after is dropped.
//  - At most kMaxToolCalls calls; later ones are dropped.
//
// == None =====================================================================================
// Every ordinary text is content; specials are dropped; a stop id ends the reply.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/tokenizer/tokenizer_config.h"

namespace waste::tok {
class Tokenizer;
}

namespace waste::reply {

inline constexpr size_t kMaxToolCalls = 128;
inline constexpr size_t kMaxHeaderBytes = 4096;         // K3 element header
inline constexpr size_t kMaxCloseNameBytes = 256;       // K3 <|close|> tag name
inline constexpr size_t kMaxDepth = 32;                 // K3 open elements, the message included
inline constexpr size_t kMaxHeldValueBytes = 64 << 10;  // K3 non-string argument value
inline constexpr size_t kMaxKimiNameBytes = 512;        // Kimi `functions.NAME:IDX`

struct ToolCall {
  std::string id, name, arguments;  // arguments: a JSON string (OpenAI's function.arguments)
};
// id and name are set only in the first delta of a call; arguments is the next piece.
struct ToolCallDelta {
  size_t index = 0;
  std::string id, name;
  std::string arguments;
};
struct ReplyDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};
struct Reply {
  std::string reasoning, content;
  std::vector<ToolCall> tool_calls;
};

struct ParserOptions {
  tok::ChatFormat format = tok::ChatFormat::None;
  bool thinking = true;                  // K3: the reply starts inside think (true) or response (false)
  std::string call_id_prefix = "call_";  // K3 call ids: prefix + running number, unique in the reply
};

class FormatParser;  // one per chat format (format_parser.h)
class ReplySink;

class ReplyParser {
 public:
  // The tokenizer must outlive the parser. Throws Error if it lacks a special the format needs.
  ReplyParser(const tok::Tokenizer& t, const ParserOptions& o);
  ~ReplyParser();
  ReplyParser(ReplyParser&&) noexcept;
  ReplyParser& operator=(ReplyParser&&) noexcept;

  // One generated id. Ids after the reply ended (or after finish()) are ignored.
  ReplyDelta push(uint32_t id);
  // End of generation (stop token, max_tokens, cancel): flushes held bytes, closes what is open.
  // A second call returns an empty delta.
  ReplyDelta finish();
  // Everything so far (the non-streamed reply); final after finish().
  const Reply& reply() const;
  // True once a tool call started (reply().tool_calls is non-empty).
  bool in_tool_calls() const;

  // Where the next ordinary text would go. Markup: markup is expected and text would be dropped
  // or is a degrade path (a K3 header or close name, text between K3 elements directly in the
  // message, which would become content, text between calls). Done: the reply ended.
  enum class Channel { Reasoning, Content, ToolCall, Markup, Done };
  Channel channel() const;

 private:
  const tok::Tokenizer* tok_;
  std::unique_ptr<ReplySink> sink_;
  std::unique_ptr<FormatParser> format_;
  std::string utf8_held_;  // the incomplete UTF-8 character at the end of the text so far
  bool finished_ = false;
};

}  // namespace waste::reply
