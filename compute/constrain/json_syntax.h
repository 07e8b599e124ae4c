// The lexical parts of JSON as grammar expressions: whitespace, string characters, numbers,
// literals, and the string formats the schema compiler supports.
//
// Whitespace policy: between two JSON tokens at most one gap of "" | " " | "\n" followed by up
// to kMaxIndent spaces or tabs; none before or after the document. Compact and pretty-printed
// (up to 10 levels of two-space indentation) replies both fit, and no reply can spin forever on
// whitespace.
// Numbers: JSON syntax with at most kMaxIntegerDigits digits before the point and two exponent
// digits, so every number is a finite double and every integer fits an int64 (a reply must
// parse in any JSON library, and 1e999 does not). Fraction digits are not bounded.
#pragma once
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "compute/constrain/expr.h"

namespace waste::constrain::json {

inline constexpr uint32_t kMaxIndent = 20;
inline constexpr uint32_t kMaxIntegerDigits = 18;

ExprPtr whitespace();
// One character of a string's content: any UTF-8 character but '"', '\' and controls, or an
// escape (\" \\ \/ \b \f \n \r \t, \uXXXX of a non-surrogate, or a \uD8xx\uDCxx pair).
ExprPtr string_char();
// The same split in two: one-byte characters, and the rest (multi-byte UTF-8 and escapes).
ExprPtr ascii_char();
ExprPtr long_char();
ExprPtr string_body(uint32_t min_chars, uint32_t max_chars);  // with the quotes
ExprPtr integer();
ExprPtr number();
// Exactly the compact text of v (nlohmann dump, UTF-8 unescaped).
ExprPtr literal(const nlohmann::ordered_json& v);
// A character class like "0-9A-Fa-f" (ASCII only).
ExprPtr char_class(std::string_view spec);
// The contents (without quotes) of a string of this format, or nullptr when not supported.
// Each is a subset of the format's valid strings (e.g. no leap seconds, no February 29).
ExprPtr format_body(std::string_view name);

}  // namespace waste::constrain::json
