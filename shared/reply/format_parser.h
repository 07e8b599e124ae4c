// The per-format half of ReplyParser (internal). ReplyParser turns ids into complete UTF-8 text
// and special ids; a FormatParser decides, per chat format, where they go and writes the result
// through the ReplySink.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>

#include "shared/reply/reply_parser.h"
#include "shared/reply/reply_sink.h"
#include "shared/tokenizer/tokenizer.h"

namespace waste::reply {

class FormatParser {
 public:
  virtual ~FormatParser() = default;
  // Text of ordinary tokens: complete, valid UTF-8 (never empty).
  virtual void text(std::string_view utf8) = 0;
  // A special id (named or reserved).
  virtual void special(uint32_t id) = 0;
  // End of generation: close whatever is open. Called once; nothing comes after it.
  virtual void finish() = 0;
  virtual ReplyParser::Channel channel() const = 0;
};

// Each throws Error if the tokenizer lacks a special token the format needs.
std::unique_ptr<FormatParser> make_k3_parser(const tok::Tokenizer& t, const ParserOptions& o, ReplySink& sink);
std::unique_ptr<FormatParser> make_kimi_parser(const tok::Tokenizer& t, const ParserOptions& o, ReplySink& sink);
std::unique_ptr<FormatParser> make_plain_parser(const tok::Tokenizer& t, const ParserOptions& o, ReplySink& sink);

// The id of a special token the format needs (Error naming the format if it is missing).
uint32_t required_special(const tok::Tokenizer& t, std::string_view name, std::string_view format);

}  // namespace waste::reply
