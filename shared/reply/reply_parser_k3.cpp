// K3 ("XTML") replies: a stack of open elements decides where text goes. Markup is read only
// from special ids (<|open|>, <|close|>, <|sep|>, <|end_of_msg|>); headers and close names are
// the ordinary text between them. The degrade rules are documented in reply_parser.h.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/reply/format_parser.h"
#include "shared/reply/k3_arguments.h"
#include "shared/reply/xtml_header.h"

namespace waste::reply {

namespace {

using Channel = ReplyParser::Channel;

enum class Kind { Message, Think, Response, Tools, Call, Argument, Json, Other, Dropped };
// Where the text of an element's body goes.
enum class Route { Stray, Reasoning, Content, Drop, ArgValue, ArgRaw };

struct Element {
  Kind kind;
  std::string name;  // for matching <|close|>NAME; "" for a header that did not parse
  Route route;
};

// What the lexer is reading: element bodies, a header (after <|open|>), a close name (after
// <|close|>), or nothing more (the reply ended).
enum class Lex { Body, Header, CloseName, Done };

bool all_space(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

class K3Parser final : public FormatParser {
 public:
  K3Parser(const tok::Tokenizer& t, const ParserOptions& o, ReplySink& sink)
      : sink_(sink),
        call_id_prefix_(o.call_id_prefix),
        open_(required_special(t, "<|open|>", "k3")),
        close_(required_special(t, "<|close|>", "k3")),
        sep_(required_special(t, "<|sep|>", "k3")),
        end_of_msg_(required_special(t, "<|end_of_msg|>", "k3")) {
    // The prompt ends inside `message role="assistant"` and `think` or `response`.
    stack_.push_back({Kind::Message, "message", Route::Stray});
    if (o.thinking)
      stack_.push_back({Kind::Think, "think", Route::Reasoning});
    else
      stack_.push_back({Kind::Response, "response", Route::Content});
  }

  void text(std::string_view utf8) override {
    switch (lex_) {
      case Lex::Done: return;
      case Lex::Body: body_text(utf8); return;
      case Lex::Header:
      case Lex::CloseName: {
        markup_ += utf8;
        const size_t limit = lex_ == Lex::Header ? kMaxHeaderBytes : kMaxCloseNameBytes;
        if (markup_.size() > limit) {
          // Too long to be markup: the <|open|>/<|close|> is dropped, the text is text.
          lex_ = Lex::Body;
          body_text(std::exchange(markup_, {}));
        }
        return;
      }
    }
  }

  void special(uint32_t id) override {
    if (lex_ == Lex::Done) return;
    if (id == open_ || id == close_) {
      // An unfinished header or close name is abandoned: a new piece of markup started.
      lex_ = id == open_ ? Lex::Header : Lex::CloseName;
      markup_.clear();
    } else if (id == sep_) {
      if (lex_ == Lex::Header) {
        lex_ = Lex::Body;
        open_element(std::exchange(markup_, {}));
      } else if (lex_ == Lex::CloseName) {
        lex_ = Lex::Body;
        close_element(std::exchange(markup_, {}));
      }
      // <|sep|> in a body separates nothing: dropped.
    } else if (id == end_of_msg_) {
      end_reply();
    }
    // Every other special (media, [BOS], [EOS], reserved, ...) is dropped.
  }

  void finish() override {
    if (lex_ == Lex::Done) return;
    markup_.clear();  // an unfinished header is dropped
    end_reply();
  }

  Channel channel() const override {
    if (lex_ == Lex::Done) return Channel::Done;
    if (lex_ != Lex::Body) return Channel::Markup;
    switch (stack_.back().route) {
      case Route::Reasoning: return Channel::Reasoning;
      case Route::Content: return Channel::Content;
      case Route::ArgValue:
      case Route::ArgRaw: return Channel::ToolCall;
      // Between elements the model writes markup (<|open|>response...); text there is only a
      // degrade path, so a JSON constraint on Content must not apply to it.
      case Route::Stray:
      case Route::Drop: return Channel::Markup;
    }
    return Channel::Markup;
  }

 private:
  void body_text(std::string_view t) {
    switch (stack_.back().route) {
      case Route::Stray:
        // Text directly in the message is content, but whitespace between elements is layout.
        if (all_space(t)) {
          if (pending_space_.size() + t.size() <= kMaxHeaderBytes) pending_space_ += t;
        } else {
          sink_.content(pending_space_);
          pending_space_.clear();
          sink_.content(t);
        }
        return;
      case Route::Reasoning: sink_.reasoning(t); return;
      case Route::Content: sink_.content(t); return;
      case Route::Drop: return;
      case Route::ArgValue: call_->argument_text(t); return;
      case Route::ArgRaw: call_->json_text(t); return;
    }
  }

  void open_element(const std::string& header_text) {
    pending_space_.clear();
    const std::optional<XtmlHeader> h = parse_xtml_header(header_text);
    if (!h) return push_transparent("");
    const std::string& name = h->name;
    if (name == "message") return end_reply();  // a new turn: this reply is over
    if (name == "think" || name == "response" || name == "tools") {
      // These live directly in the message: whatever is still open below it is closed.
      pop_until([](const Element& e) { return e.kind == Kind::Message; });
      const Kind kind = name == "think" ? Kind::Think : name == "response" ? Kind::Response : Kind::Tools;
      const Route route = name == "think" ? Route::Reasoning : name == "response" ? Route::Content : Route::Drop;
      stack_.push_back({kind, name, route});
      return;
    }
    if (name == "call") return open_call(*h);
    if (name == "argument" || name == "json") return open_call_child(*h);
    push_transparent(name);
  }

  void open_call(const XtmlHeader& h) {
    pop_until([](const Element& e) { return e.kind == Kind::Tools || e.kind == Kind::Message; });
    const std::string* tool = h.attributes_ok ? h.get("tool") : nullptr;
    if (tool == nullptr || tool->empty() || sink_.calls() >= kMaxToolCalls) return push_dropped("call");
    const size_t index = sink_.begin_call(call_id_prefix_ + std::to_string(sink_.calls() + 1), *tool);
    call_.emplace(sink_, index);
    stack_.push_back({Kind::Call, "call", Route::Drop});
  }

  void open_call_child(const XtmlHeader& h) {
    size_t call_at = 0;
    for (size_t i = stack_.size(); i-- > 1;)
      if (stack_[i].kind == Kind::Call) {
        call_at = i;
        break;
      }
    if (call_at == 0) return push_dropped(h.name);  // not in a call: no arguments to add to
    while (stack_.size() > call_at + 1) pop(/*cut=*/true);
    if (h.name == "json") {
      if (!call_->begin_json()) return push_dropped(h.name);
      stack_.push_back({Kind::Json, h.name, Route::ArgRaw});
      return;
    }
    const std::string* key = h.attributes_ok ? h.get("key") : nullptr;
    const std::string* type = h.get("type");
    if (key == nullptr || !call_->begin_argument(*key, type ? std::string_view(*type) : std::string_view()))
      return push_dropped(h.name);
    stack_.push_back({Kind::Argument, h.name, Route::ArgValue});
  }

  // Unknown names and unparsable headers: the markup goes, the body goes where the parent's does.
  void push_transparent(const std::string& name) {
    if (stack_.size() < kMaxDepth) stack_.push_back({Kind::Other, name, stack_.back().route});
  }
  void push_dropped(const std::string& name) {
    if (stack_.size() < kMaxDepth) stack_.push_back({Kind::Dropped, name, Route::Drop});
  }

  void close_element(const std::string& text) {
    pending_space_.clear();
    const std::optional<std::string> name = parse_xtml_close_name(text);
    if (!name) return;
    if (*name == "message") return end_reply();
    for (size_t i = stack_.size(); i-- > 1;) {
      if (stack_[i].name != *name) continue;
      // Everything inside the closed element is closed with it, implicitly.
      while (stack_.size() > i + 1) pop(/*cut=*/true);
      pop(/*cut=*/false);
      return;
    }
    // A close for nothing open: ignored.
  }

  template <class Stop>
  void pop_until(Stop stop) {
    while (stack_.size() > 1 && !stop(stack_.back())) pop(/*cut=*/true);
  }

  // Closes the innermost element. cut: the model did not close it itself.
  void pop(bool cut) {
    const Kind kind = stack_.back().kind;
    stack_.pop_back();
    switch (kind) {
      case Kind::Argument: call_->end_argument(cut); break;
      case Kind::Json: call_->end_json(cut); break;
      case Kind::Call:
        call_->end_call();
        call_.reset();
        break;
      default: break;
    }
  }

  void end_reply() {
    while (stack_.size() > 1) pop(/*cut=*/true);
    pending_space_.clear();
    markup_.clear();
    lex_ = Lex::Done;
  }

  ReplySink& sink_;
  const std::string call_id_prefix_;
  const uint32_t open_, close_, sep_, end_of_msg_;
  std::vector<Element> stack_;  // [0] is the message; at most kMaxDepth
  Lex lex_ = Lex::Body;
  std::string markup_;                   // the header or close name being read, <= its bound
  std::string pending_space_;            // whitespace directly in the message, held until text follows
  std::optional<K3CallArguments> call_;  // the open call; calls never nest
};

}  // namespace

std::unique_ptr<FormatParser> make_k3_parser(const tok::Tokenizer& t, const ParserOptions& o, ReplySink& sink) {
  return std::make_unique<K3Parser>(t, o, sink);
}

}  // namespace waste::reply
