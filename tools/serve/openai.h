// The OpenAI-compatible request/response shapes of waste-serve: parsing and checking a request
// body into an Engine request, and the JSON of replies, stream chunks and errors. No I/O here.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tools/libwaste/engine_client.h"

namespace waste::serve {

// An OpenAI-style error: HTTP status + {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message, type = "invalid_request_error", param, code;
};
nlohmann::json error_body(const ApiError& e);

struct ParsedRequest {
  client::Request request;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool parallel_tool_calls = true;  // false: only the reply's first tool call is returned
  std::string prompt_text;     // all message contents / the prompt, for the length pre-check
};

struct Limits {
  uint32_t max_tokens_cap = 1u << 16;  // largest max_tokens accepted
  size_t max_prompt_bytes = 1u << 20;
};

// Parses a body of /v1/chat/completions (chat = true) or /v1/completions. Returns the request
// or fills *err (400, naming the field) for malformed JSON, a field of the wrong type or out of
// range, or a field this server does not support (never silently ignored).
std::optional<ParsedRequest> parse_request(const std::string& body, bool chat, const Limits& limits, ApiError* err);

// finish_reason of a finished generation: length, tool_calls (the reply ends in calls) or stop.
const char* finish_reason(const client::Result& r);

nlohmann::json usage_json(const client::Result& r);

}  // namespace waste::serve
