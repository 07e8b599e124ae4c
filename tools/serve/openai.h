// The OpenAI-compatible request/response shapes of waste-serve: parsing and checking a request
// body into an Engine request, and the JSON of replies, stream chunks and errors. No I/O here.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "shared/image/image_budget.h"
#include "tools/libwaste/engine_client.h"

namespace waste::serve {

// An OpenAI-style error: HTTP status + {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message, type = "invalid_request_error", param, code;
};
// The error object a client gets: the one place where what the server knows becomes what the
// client sees. A 5xx says only what failed, in general terms, with the request id (the log has
// the full message under that id): compute's socket path, the run directory, the model's path
// are the server's business. A 4xx keeps its message (it tells the client what to fix) with the
// private paths (set_private_paths) and any other absolute path but an endpoint's (/v1/...)
// replaced by "<path>".
nlohmann::json error_body(const ApiError& e, const std::string& request_id = "");
// What error_body says for e.message.
std::string client_message(const ApiError& e, const std::string& request_id = "");
// This server's own paths (compute's socket, the run directory, the model, the image
// directory), scrubbed from every error message. Set once at start.
void set_private_paths(std::vector<std::string> paths);

// An image content part of a chat request: where it is in request.chat, and how the client named
// it. Its reference (request.chat's part text: a data: URL or a file under --image-dir) becomes
// the file's bytes in load_images (images.h) before the request goes to compute.
struct ImagePart {
  size_t message = 0, part = 0;  // request.chat.messages[message].content[part]
  std::string field;             // "messages[i].content[j]": the image (errors about its content)
  std::string url_field;         // "messages[i].content[j].image_url.url": its reference
  bool local_file = false;       // a file:// URL or a path (needs --image-dir), else a data: URL
};

// detail "low": the request's images take at most this many patches (64 image tokens each)
// instead of compute's default; "high" and "auto" take the default. waste-serve's own choice,
// within the shared bounds (shared/image/image_budget.h).
constexpr uint32_t kLowDetailPatches = 256;
static_assert(kLowDetailPatches >= uint32_t(kMinImagePatches) && kLowDetailPatches <= uint32_t(kDefaultImagePatches));

// The default --max-body: what a request's images can need when the model has a vision tower
// (kMaxImageBytesPerRequest as base64 data: URLs, 4/3 of it, plus 1 MiB for the rest of the
// request), else 1 MiB. Each HTTP thread may hold one body and its parsed JSON.
constexpr size_t kDefaultMaxBody = 1u << 20;
constexpr size_t kDefaultMaxBodyVision = size_t((kMaxImageBytesPerRequest + 2) / 3 * 4) + (1u << 20);
constexpr size_t default_max_body(bool vision) { return vision ? kDefaultMaxBodyVision : kDefaultMaxBody; }

struct ParsedRequest {
  client::Request request;
  std::vector<ImagePart> images;  // a chat's image parts, in prompt order
  bool low_detail = false;        // every image asked for detail "low"
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool usage_said = false;     // include_usage was given (either way): without it the last chunk carries usage too
  bool parallel_tool_calls = true;  // false: only the reply's first tool call is returned
  std::string prompt_text;     // all message contents / the prompt, for the length pre-check
  std::optional<std::string> model;  // the request's "model" (absent or null: the served one)
};

struct Limits {
  uint32_t max_tokens_cap = 1u << 16;  // largest max_tokens accepted
  size_t max_messages = 2048;          // messages of a chat
  size_t max_stop = 4;                 // stop sequences (OpenAI's bound)
  size_t max_stop_bytes = 256;         // of one stop sequence
  size_t max_tools = 128;              // tools of a chat (OpenAI's bound)
  // A tool's definition, and response_format, as JSON text: each becomes a grammar compute
  // builds and walks, so its size is bounded apart from the body's.
  size_t max_schema_bytes = 64u << 10;
  size_t max_prompt_bytes = 1u << 20;  // of text (images are bounded by the body and by compute)
  bool local_images = false;           // --image-dir given: file:// URLs and paths may name images
  // The parsed body's JSON tree, bounded while it is built (a body of tiny elements would take
  // some 65 bytes of tree per 3 bytes of body): its values (objects, arrays, strings, numbers,
  // ...) and its nesting (code that walks a schema or dumps a value recurses).
  uint64_t max_json_elements = 1u << 20;
  int max_json_depth = 128;
};

// Parses a body of /v1/chat/completions (chat = true) or /v1/completions. Returns the request
// or fills *err (400, naming the field) for malformed JSON, a field of the wrong type or out of
// range, or a field this server does not support (never silently ignored); 413 for a body of
// more JSON values than limits.max_json_elements, 400 for one nested deeper than max_json_depth.
std::optional<ParsedRequest> parse_request(const std::string& body, bool chat, const Limits& limits, ApiError* err);

// finish_reason of a finished generation: length, tool_calls (the reply ends in calls) or stop.
const char* finish_reason(const client::Result& r);

// OpenAI's usage; prompt_tokens_details.image_tokens (an extension: the prompt positions the
// images took, counted in prompt_tokens) only when there were some.
nlohmann::json usage_json(const client::Result& r);

// Whether s begins with prefix, ASCII letters compared without case (URL schemes and hosts are
// case-insensitive, RFC 3986 3.1 and 3.2.2); prefix is given in lower case.
bool starts_with_nocase(std::string_view s, std::string_view prefix);

}  // namespace waste::serve
