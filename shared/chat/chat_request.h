// A chat request as the prompt renderers see it: OpenAI's chat fields (messages with names,
// content parts, tool calls, tool results, reasoning; tools, tool_choice, response_format) plus
// K3's own (thinking, thinking_effort, add_generation_prompt, image_prompts). Parsed from the
// JSON a client sent (the HTTP body, `waste prompt --request`), carried over the Engine RPC, and
// checked once here: every field either is understood or is an error naming it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/chat/python_json.h"
#include "shared/util/error.h"

namespace waste::chat {

// A request field at fault: `param` is its path (messages[2].tool_calls[0].function.name), for
// the OpenAI error object.
class RequestError : public Error {
 public:
  RequestError(std::string param, const std::string& message)
      : Error(param + ": " + message, ErrorKind::InvalidRequest, param), param(std::move(param)) {}
  std::string param;
};

struct ContentPart {
  enum class Kind { Text, Image } kind = Kind::Text;
  std::string text;  // Text: the text; Image: the image reference (a data: URL) when `data` is empty
  std::vector<uint8_t> data;  // Image: the encoded file itself (a CLI's --image), sent as is
};

struct ToolCall {
  std::optional<std::string> id;
  std::string name;
  // The arguments as the client sent them: JSON text (an object given as JSON is written back
  // to text in its own key order). Rendered as typed elements when it parses as an object, as
  // a raw `json` element when it does not parse; blank = no arguments.
  std::string arguments;
};

struct Message {
  std::string role;  // system, user, assistant, tool ("developer" arrives as system)
  std::vector<ContentPart> content;
  std::string name;  // "" = none
  std::string reasoning;  // assistant: reasoning_content (or reasoning)
  std::vector<ToolCall> tool_calls;  // assistant
  std::optional<std::string> tool_call_id;  // tool: the call it answers
  std::optional<std::string> tool;  // tool: the tool's name when the client gave it ("tool", else "name")
  Json tools;  // system: tools declared mid-conversation (null: none)
};

struct ToolChoice {
  enum class Mode { Auto, None, Required, Named } mode = Mode::Auto;
  std::string name;  // Named: the function
  bool given = false;
};

struct ResponseFormat {
  enum class Type { Text, JsonObject, JsonSchema } type = Type::Text;
  Json schema;  // JsonSchema: the schema itself
};

struct ChatRequest {
  std::vector<Message> messages;
  Json tools;  // array of {"type": "function", "function": {...}}, or null
  ToolChoice tool_choice;
  ResponseFormat response_format;
  bool thinking = true;
  bool thinking_given = false;
  std::string thinking_effort;  // "" = none; K3: low, high, max
  bool add_generation_prompt = true;
  std::optional<std::vector<std::string>> image_prompts;  // one rendered media prompt per image
};

// Values nested deeper than this are refused (nlohmann copies and Python-style dumps recurse).
inline constexpr size_t kMaxJsonDepth = 64;
// Throws RequestError(where) when `j` nests deeper than kMaxJsonDepth. Iterative.
void check_json_depth(const Json& j, const std::string& where);

// Which top-level fields parse_chat_request reads. The HTTP server knows its own sampling
// fields; `waste prompt` accepts only these.
const std::vector<std::string>& chat_request_fields();

// Reads the chat fields of `j` (an object). Fields it does not know are left to the caller.
// Throws RequestError naming the field for a wrong type or value. `reasoning_effort` (OpenAI)
// maps to thinking_effort: none -> thinking off, minimal/low -> low, medium -> the model's
// default (no effort note), high -> high.
ChatRequest parse_chat_request(const Json& j);

// Tool names declared by the request (tools[].function.name), in order.
std::vector<std::string> declared_tool_names(const ChatRequest& r);

}  // namespace waste::chat
