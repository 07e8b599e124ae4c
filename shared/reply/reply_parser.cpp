#include "shared/reply/reply_parser.h"

#include "shared/reply/format_parser.h"
#include "shared/reply/reply_sink.h"
#include "shared/reply/utf8_text.h"
#include "shared/tokenizer/tokenizer.h"
#include "shared/util/error.h"

namespace waste::reply {

uint32_t required_special(const tok::Tokenizer& t, std::string_view name, std::string_view format) {
  auto id = t.special_id(name);
  require(id.has_value(),
          "reply parser (" + std::string(format) + "): the tokenizer has no special token " + std::string(name));
  return *id;
}

ReplyParser::ReplyParser(const tok::Tokenizer& t, const ParserOptions& o)
    : tok_(&t), sink_(std::make_unique<ReplySink>()) {
  switch (o.format) {
    case tok::ChatFormat::K3: format_ = make_k3_parser(t, o, *sink_); break;
    case tok::ChatFormat::Kimi: format_ = make_kimi_parser(t, o, *sink_); break;
    case tok::ChatFormat::None: format_ = make_plain_parser(t, o, *sink_); break;
  }
  require(format_ != nullptr, "reply parser: unknown chat format");
}

ReplyParser::~ReplyParser() = default;
ReplyParser::ReplyParser(ReplyParser&&) noexcept = default;
ReplyParser& ReplyParser::operator=(ReplyParser&&) noexcept = default;

ReplyDelta ReplyParser::push(uint32_t id) {
  if (finished_) return {};
  if (tok_->ranks().has_rank(id)) {
    const std::string text = utf8_take_complete(utf8_held_, tok_->ranks().token_bytes(id));
    if (!text.empty()) format_->text(text);
  } else if (tok_->is_special(id)) {
    // A special ends the text run: a character still incomplete can no longer complete.
    const std::string rest = utf8_flush(utf8_held_);
    if (!rest.empty()) format_->text(rest);
    format_->special(id);
  }
  // An id that is no token at all (outside the vocabulary) is dropped.
  return sink_->take();
}

ReplyDelta ReplyParser::finish() {
  if (finished_) return {};
  finished_ = true;
  const std::string rest = utf8_flush(utf8_held_);
  if (!rest.empty()) format_->text(rest);
  format_->finish();
  return sink_->take();
}

const Reply& ReplyParser::reply() const { return sink_->reply(); }

bool ReplyParser::in_tool_calls() const { return sink_->calls() > 0; }

ReplyParser::Channel ReplyParser::channel() const { return finished_ ? Channel::Done : format_->channel(); }

}  // namespace waste::reply
