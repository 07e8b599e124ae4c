#include "compute/reply_constraint.h"

#include <cmath>

#include "shared/chat/render.h"

#include "shared/util/error.h"

namespace waste {

namespace {

using Kind = ConstraintSpec::Kind;

uint32_t special(const tok::Tokenizer& t, const char* name) {
  auto id = t.special_id(name);
  require(id.has_value(), std::string("constrained reply: the tokenizer has no ") + name);
  return *id;
}

}  // namespace

ReplyConstraint::ReplyConstraint(const tok::Tokenizer& t, std::shared_ptr<const constrain::TokenVocabulary> vocab,
                                 bool thinking, const ConstraintSpec& spec)
    : tok_(t), vocab_(std::move(vocab)), spec_(spec) {
  require(spec.kind != Kind::None, "constrained reply: nothing to constrain");
  require(spec.kind != Kind::ToolCall || !spec.tools.empty(), "constrained reply: no tool to call");
  using S = Step::Kind;
  auto sp = [&](uint32_t id) { steps_.push_back({S::Special, id, {}, false, nullptr}); };
  auto lit = [&](std::string s) { steps_.push_back({S::Literal, 0, {std::move(s)}, false, nullptr}); };
  std::vector<std::string> names;
  if (t.config().chat_format == tok::ChatFormat::K3) {
    const uint32_t open = special(t, "<|open|>"), close = special(t, "<|close|>"), sep = special(t, "<|sep|>"),
                   eom = special(t, "<|end_of_msg|>");
    auto open_tag = [&](const std::string& header) { sp(open), lit(header), sp(sep); };
    auto close_tag = [&](const std::string& tag) { sp(close), lit(tag), sp(sep); };
    // <|open|>think<|sep|> is the prompt's end: reason freely until <|close|>.
    if (thinking) {
      steps_.push_back({S::FreeText, close, {}, false, nullptr});
      lit("think"), sp(sep);
      open_tag("response");
    }
    if (spec.kind == Kind::Json) {
      steps_.push_back({S::Grammar, close, {}, false, spec.json});
      lit("response"), sp(sep);
    } else {
      // An empty response, then one call whose arguments are a raw `json` element that the
      // tool's parameter schema constrains.
      close_tag("response");
      open_tag("tools");
      sp(open), lit("call tool=\"");
      // The name as the renderer writes attribute values (escaped), so the parser reads it back.
      for (const auto& [name, g] : spec.tools) names.push_back(chat::escape_attr(name) + "\" index=\"1\"");
      steps_.push_back({S::Literal, 0, names, true, nullptr});
      sp(sep);
      open_tag("json type=\"object\"");
      steps_.push_back({S::Grammar, close, {}, false, nullptr});
      lit("json"), sp(sep);
      close_tag("call");
      close_tag("tools");
    }
    close_tag("message");
    sp(eom);
  } else {
    const uint32_t end = special(t, "<|im_end|>");
    if (spec.kind == Kind::Json) {
      steps_.push_back({S::Grammar, end, {}, false, spec.json});
    } else {
      sp(special(t, "<|tool_calls_section_begin|>"));
      sp(special(t, "<|tool_call_begin|>"));
      for (const auto& [name, g] : spec.tools) names.push_back("functions." + name + ":" + std::to_string(spec.call_index));
      steps_.push_back({S::Literal, 0, names, true, nullptr});
      sp(special(t, "<|tool_call_argument_begin|>"));
      steps_.push_back({S::Grammar, special(t, "<|tool_call_end|>"), {}, false, nullptr});
      sp(special(t, "<|tool_calls_section_end|>"));
      sp(end);
    }
  }
  enter_step();
}

void ReplyConstraint::enter_step() {
  literal_.clear();
  matcher_.reset();
  if (done()) return;
  const Step& s = steps_[step_];
  if (s.kind == Step::Kind::Grammar)
    matcher_ = std::make_unique<constrain::GrammarMatcher>(s.grammar ? s.grammar : spec_.tools[chosen_tool_].second, vocab_);
}

bool ReplyConstraint::literal_allows(uint32_t id) const {
  // Called for every id of the vocabulary when a Literal step masks: no allocation here.
  if (!vocab_->ordinary(id)) return false;
  const std::string_view b = vocab_->bytes(id);
  for (const std::string& c : steps_[step_].candidates)
    if (c.size() >= literal_.size() + b.size() && c.compare(0, literal_.size(), literal_) == 0 &&
        c.compare(literal_.size(), b.size(), b) == 0)
      return true;
  return false;
}

bool ReplyConstraint::allows(uint32_t id) const {
  if (done()) return true;
  const Step& s = steps_[step_];
  switch (s.kind) {
    case Step::Kind::FreeText: return id == s.special || (id < tok_.vocab_size() && !tok_.is_special(id));
    case Step::Kind::Special: return id == s.special;
    case Step::Kind::Literal: return literal_allows(id);
    case Step::Kind::Grammar: return (id == s.special && matcher_->complete()) || matcher_->allows(id);
  }
  return false;
}

void ReplyConstraint::mask(std::span<float> logits) const {
  if (done()) return;
  const Step& s = steps_[step_];
  const float neg = -INFINITY;
  switch (s.kind) {
    case Step::Kind::FreeText:
      for (size_t i = 0; i < logits.size(); ++i)
        if (!allows(uint32_t(i))) logits[i] = neg;
      break;
    case Step::Kind::Special:
      for (size_t i = 0; i < logits.size(); ++i)
        if (i != s.special) logits[i] = neg;
      break;
    case Step::Kind::Literal:
      for (size_t i = 0; i < logits.size(); ++i)
        if (!literal_allows(uint32_t(i))) logits[i] = neg;
      break;
    case Step::Kind::Grammar: {
      const float end = s.special < logits.size() ? logits[s.special] : neg;
      matcher_->mask(logits);
      if (matcher_->complete() && s.special < logits.size()) logits[s.special] = end;
      break;
    }
  }
}

void ReplyConstraint::accept(uint32_t id) {
  if (done()) return;
  if (!allows(id)) {
    step_ = steps_.size();  // off the rails (only a caller that ignored mask gets here)
    return;
  }
  Step& s = steps_[step_];
  bool advance = false;
  switch (s.kind) {
    case Step::Kind::FreeText: advance = id == s.special; break;
    case Step::Kind::Special: advance = true; break;
    case Step::Kind::Literal:
      literal_ += vocab_->bytes(id);
      for (size_t k = 0; k < s.candidates.size(); ++k)
        if (s.candidates[k] == literal_) {
          advance = true;
          if (s.choose_tool) chosen_tool_ = k;
        }
      break;
    case Step::Kind::Grammar:
      if (id == s.special) advance = true;
      else matcher_->accept(id);
      break;
  }
  if (advance) {
    ++step_;
    enter_step();
  }
}

}  // namespace waste
