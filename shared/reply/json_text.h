// Small JSON text helpers for tool call arguments: escaping streamed string pieces, checking a
// value the model wrote, and closing JSON text that generation cut off.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace waste::reply {

// Appends `utf8` escaped as the inside of a JSON string (no quotes). Escapes only what JSON
// requires (", \, control characters), so pieces escape independently: escape(a) + escape(b) ==
// escape(a + b), which is what lets string values stream.
void append_json_escaped(std::string& out, std::string_view utf8);
std::string json_quote(std::string_view utf8);

// True if `text` is exactly one JSON value (surrounding whitespace allowed).
bool is_json_value(std::string_view text);

// The shortest suffix this small repair knows that makes `text` (JSON cut off mid-way) one
// complete JSON value: closes an open string (finishing a cut escape), completes a cut literal
// or number, gives a dangling key `null`, and closes open arrays and objects. nullopt when
// `text` is already a value, or when no such suffix is found (it never invents keys or array
// elements: a trailing comma stays unrepaired). The result is checked with is_json_value.
std::optional<std::string> json_closing_suffix(std::string_view text);

}  // namespace waste::reply
