// Kimi replies (K2, the K2.5 line, Kimi-Linear): plain content, <think> reasoning when the
// tokenizer has those specials, and a tool call section of special-delimited calls. A small
// state machine over special ids; the degrade rules are documented in reply_parser.h.
#include <optional>
#include <string>
#include <vector>

#include "shared/reply/format_parser.h"
#include "shared/reply/json_text.h"
#include "shared/reply/kimi_call_name.h"

namespace waste::reply {

namespace {

using Channel = ReplyParser::Channel;

enum class State {
  Content,
  Think,
  Section,      // inside the tool call section, between calls
  CallName,     // after <|tool_call_begin|>: `functions.NAME:IDX`
  CallArgs,     // after <|tool_call_argument_begin|>: the JSON arguments
  DroppedCall,  // a call whose name was unusable: its arguments are dropped
  Done,
};

class KimiParser final : public FormatParser {
 public:
  KimiParser(const tok::Tokenizer& t, ReplySink& sink)
      : sink_(sink),
        section_begin_(required_special(t, "<|tool_calls_section_begin|>", "kimi")),
        section_end_(required_special(t, "<|tool_calls_section_end|>", "kimi")),
        call_begin_(required_special(t, "<|tool_call_begin|>", "kimi")),
        argument_begin_(required_special(t, "<|tool_call_argument_begin|>", "kimi")),
        call_end_(required_special(t, "<|tool_call_end|>", "kimi")),
        im_end_(required_special(t, "<|im_end|>", "kimi")),
        // Only the K2.5 line names these; in Kimi-Linear the ids are reserved tokens.
        think_(t.special_id("<think>")),
        think_end_(t.special_id("</think>")) {
    for (const char* name : {"<|im_user|>", "<|im_assistant|>", "<|im_system|>"})
      if (auto id = t.special_id(name)) turn_starts_.push_back(*id);
  }

  void text(std::string_view utf8) override {
    switch (state_) {
      case State::Content: sink_.content(utf8); return;
      case State::Think: sink_.reasoning(utf8); return;
      case State::CallName:
        if (name_.size() + utf8.size() <= kMaxKimiNameBytes)
          name_ += utf8;
        else
          name_overflow_ = true;
        return;
      case State::CallArgs: sink_.arguments(call_, utf8); return;
      case State::Section:
      case State::DroppedCall:
      case State::Done: return;
    }
  }

  void special(uint32_t id) override {
    if (state_ == State::Done) return;
    if (id == im_end_ || is_turn_start(id)) {
      end_call(/*cut=*/true);
      state_ = State::Done;
    } else if (id == section_begin_) {
      end_call(/*cut=*/true);  // also leaves an unclosed <think>
      state_ = State::Section;
    } else if (id == section_end_) {
      if (state_ == State::Think) return;
      end_call(/*cut=*/true);
      state_ = State::Content;
    } else if (id == call_begin_) {
      end_call(/*cut=*/true);
      state_ = State::CallName;
      name_.clear();
      name_overflow_ = false;
    } else if (id == argument_begin_) {
      if (state_ == State::CallName) start_call();
    } else if (id == call_end_) {
      if (state_ == State::CallName || state_ == State::CallArgs || state_ == State::DroppedCall) {
        end_call(/*cut=*/false);
        state_ = State::Section;
      }
    } else if (think_ && id == *think_) {
      if (state_ == State::Content) state_ = State::Think;
    } else if (think_end_ && id == *think_end_) {
      if (state_ == State::Think) state_ = State::Content;
    }
    // Every other special (media, [BOS], [EOS], reserved, ...) is dropped.
  }

  void finish() override {
    // A call cut in its name is dropped (the name itself may be cut); cut arguments are closed.
    if (state_ == State::CallName) state_ = State::DroppedCall;
    end_call(/*cut=*/true);
    state_ = State::Done;
  }

  Channel channel() const override {
    switch (state_) {
      case State::Content: return Channel::Content;
      case State::Think: return Channel::Reasoning;
      case State::CallName:
      case State::CallArgs: return Channel::ToolCall;
      case State::Section:
      case State::DroppedCall: return Channel::Markup;
      case State::Done: return Channel::Done;
    }
    return Channel::Markup;
  }

 private:
  bool is_turn_start(uint32_t id) const {
    for (uint32_t s : turn_starts_)
      if (s == id) return true;
    return false;
  }

  // The name is complete: the call starts (CallArgs) or is dropped (DroppedCall).
  void start_call() {
    std::optional<KimiCallName> n = name_overflow_ ? std::nullopt : parse_kimi_call_name(name_);
    name_.clear();
    if (!n || sink_.calls() >= kMaxToolCalls) {
      state_ = State::DroppedCall;
      return;
    }
    const std::string position = std::to_string(sink_.calls());
    std::string id = n->id;
    if (!n->has_index) id.append(":").append(position);
    // Clients match tool results to calls by id, so ids must be unique in the reply.
    while (id_taken(id)) id.append("_").append(position);
    call_ = sink_.begin_call(std::move(id), std::move(n->name));
    state_ = State::CallArgs;
  }

  bool id_taken(const std::string& id) const {
    for (const ToolCall& c : sink_.reply().tool_calls)
      if (c.id == id) return true;
    return false;
  }

  // Leaves a call (if one is open). cut: the model did not write <|tool_call_end|>.
  void end_call(bool cut) {
    if (state_ == State::CallName) start_call();  // a special ended the name: it is complete
    if (state_ == State::CallArgs) {
      const std::string& args = sink_.reply().tool_calls[call_].arguments;
      if (args.find_first_not_of(" \t\r\n") == std::string::npos) {
        sink_.arguments(call_, "{}");  // no arguments written: an empty object
      } else if (cut) {
        if (auto suffix = json_closing_suffix(args)) sink_.arguments(call_, *suffix);
      }
    }
    if (state_ == State::CallArgs || state_ == State::DroppedCall) state_ = State::Section;
  }

  ReplySink& sink_;
  const uint32_t section_begin_, section_end_, call_begin_, argument_begin_, call_end_, im_end_;
  const std::optional<uint32_t> think_, think_end_;
  std::vector<uint32_t> turn_starts_;
  State state_ = State::Content;
  std::string name_;  // the call name being read, <= kMaxKimiNameBytes
  bool name_overflow_ = false;
  size_t call_ = 0;  // index of the open call (State::CallArgs)
};

}  // namespace

std::unique_ptr<FormatParser> make_kimi_parser(const tok::Tokenizer& t, const ParserOptions&, ReplySink& sink) {
  return std::make_unique<KimiParser>(t, sink);
}

}  // namespace waste::reply
