// The grammar compiler's intermediate form: regular expressions over bytes whose leaves may call
// another rule (a pushdown grammar, one automaton per rule). The JSON-schema compiler builds
// these; nfa.h turns a rule's expression into a deterministic automaton.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace waste::constrain {

inline constexpr uint32_t kUnbounded = UINT32_MAX;

struct ByteRange {
  uint8_t lo, hi;  // inclusive
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

// A property of an object expression (Expr::Kind::Object).
struct ObjectField {
  std::string key;  // the key as JSON text, quotes included
  ExprPtr value;
  bool required = false;
};

struct Expr {
  enum class Kind {
    Empty,    // the empty string
    Nothing,  // no string at all (an unsatisfiable schema)
    Bytes,    // one byte from `ranges`
    Seq,      // items one after the other
    Alt,      // any one of items
    Repeat,   // items[0] between min and max times (max may be kUnbounded)
    Call,     // the language of rule `rule` (its own automaton, on the parse stack)
    Object,   // "{" fields in order, each required one present, optional ones skippable, "}"
  };
  Kind kind = Kind::Empty;
  std::vector<ByteRange> ranges;
  std::vector<ExprPtr> items;
  uint32_t min = 0, max = 0;
  uint32_t rule = 0;
  std::vector<ObjectField> fields;
  ExprPtr ws;  // Object: the whitespace allowed between its tokens
};

ExprPtr e_empty();
ExprPtr e_nothing();
ExprPtr e_bytes(std::vector<ByteRange> ranges);
ExprPtr e_byte(uint8_t b);
ExprPtr e_range(uint8_t lo, uint8_t hi);
ExprPtr e_literal(std::string_view bytes);
ExprPtr e_seq(std::vector<ExprPtr> items);
ExprPtr e_alt(std::vector<ExprPtr> items);
ExprPtr e_repeat(ExprPtr item, uint32_t min, uint32_t max);
ExprPtr e_opt(ExprPtr item);
ExprPtr e_call(uint32_t rule);
ExprPtr e_object(std::vector<ObjectField> fields, ExprPtr ws);

// An upper estimate of the automaton states the expression instantiates (repeats multiply), for
// deciding whether to inline an array's items or call them as a rule.
uint64_t expr_size(const Expr& e);

}  // namespace waste::constrain
