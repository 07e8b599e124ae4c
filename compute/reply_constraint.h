// Constrained replies: a chat reply whose shape the request fixes (response_format json_object /
// json_schema, tool_choice required / a named function) is sampled through a sequence of steps
// over token ids, so the reply always parses: the markup the format needs is forced, free text
// stays free where the format has it (K3's think channel), and JSON comes from a grammar that
// masks the vocabulary (compute/constrain/). Each step allows a set of ids:
//   FreeText  any ordinary token, or the one special that ends the step
//   Special   exactly one special id
//   Literal   ordinary tokens spelling one of a few strings (a tag name, a tool's name)
//   Grammar   tokens the JSON grammar allows; once the document is complete, also its end special
// The shapes per format are in reply_constraint.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/constrain/grammar_matcher.h"
#include "shared/tokenizer/tokenizer.h"

namespace waste {

struct ConstraintSpec {
  enum class Kind { None, Json, ToolCall } kind = Kind::None;
  std::shared_ptr<const constrain::Grammar> json;  // Json: the content's grammar
  // ToolCall: the tools the call may name (one for a named tool_choice), each with the grammar
  // of its parameters.
  std::vector<std::pair<std::string, std::shared_ptr<const constrain::Grammar>>> tools;
  size_t call_index = 0;  // Kimi: calls earlier in the conversation (the forced call's IDX)
};

class ReplyConstraint {
 public:
  // `thinking`: K3's reply starts inside the think element (free reasoning first).
  ReplyConstraint(const tok::Tokenizer& t, std::shared_ptr<const constrain::TokenVocabulary> vocab, bool thinking,
                  const ConstraintSpec& spec);
  bool allows(uint32_t id) const;
  // Sets every id this step does not allow to -infinity.
  void mask(std::span<float> logits) const;
  // The id generated (allowed or not: a disallowed id ends the constraint, the reply then
  // degrades as an unconstrained one would).
  void accept(uint32_t id);
  bool done() const { return step_ >= steps_.size(); }

 private:
  struct Step {
    enum class Kind { FreeText, Special, Literal, Grammar } kind;
    uint32_t special = 0;                  // FreeText / Grammar: the special that ends it; Special: the id
    std::vector<std::string> candidates;   // Literal
    bool choose_tool = false;              // Literal: the candidates are the tools, in spec order
    std::shared_ptr<const constrain::Grammar> grammar;  // Grammar (null: the chosen tool's)
  };
  void enter_step();
  bool literal_allows(uint32_t id) const;

  const tok::Tokenizer& tok_;
  std::shared_ptr<const constrain::TokenVocabulary> vocab_;
  ConstraintSpec spec_;
  std::vector<Step> steps_;
  size_t step_ = 0;
  std::string literal_;  // bytes of the current Literal so far
  size_t chosen_tool_ = 0;
  std::unique_ptr<constrain::GrammarMatcher> matcher_;
};

}  // namespace waste
