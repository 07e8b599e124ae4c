// ChatFormat::None: a model without a chat format writes plain text. Everything ordinary is
// content; specials are markup we cannot interpret and are dropped; a stop id ends the reply.
#include "shared/reply/format_parser.h"

namespace waste::reply {

namespace {

class PlainParser final : public FormatParser {
 public:
  PlainParser(const tok::Tokenizer& t, ReplySink& sink) : tok_(t), sink_(sink) {}

  void text(std::string_view utf8) override {
    if (!done_) sink_.content(utf8);
  }
  void special(uint32_t id) override {
    if (tok_.is_stop(id)) done_ = true;
  }
  void finish() override { done_ = true; }
  ReplyParser::Channel channel() const override {
    return done_ ? ReplyParser::Channel::Done : ReplyParser::Channel::Content;
  }

 private:
  const tok::Tokenizer& tok_;
  ReplySink& sink_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<FormatParser> make_plain_parser(const tok::Tokenizer& t, const ParserOptions&, ReplySink& sink) {
  return std::make_unique<PlainParser>(t, sink);
}

}  // namespace waste::reply
