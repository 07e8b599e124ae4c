// The text between Kimi's <|tool_call_begin|> and <|tool_call_argument_begin|>:
// `functions.NAME:IDX`. The whole text is the call id OpenAI clients see; NAME is the function.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace waste::reply {

struct KimiCallName {
  std::string id, name;
  bool has_index = false;  // the text ended in `:IDX`
};

// Trims whitespace; tolerates a missing `functions.` prefix and a missing `:IDX` suffix.
// nullopt when no name is left.
std::optional<KimiCallName> parse_kimi_call_name(std::string_view text);

}  // namespace waste::reply
