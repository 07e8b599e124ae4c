#include "shared/reply/json_text.h"

#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace waste::reply {

void append_json_escaped(std::string& out, std::string_view utf8) {
  static const char* hex = "0123456789abcdef";
  for (char ch : utf8) {
    const auto c = static_cast<uint8_t>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
}

std::string json_quote(std::string_view utf8) {
  std::string out = "\"";
  append_json_escaped(out, utf8);
  out += '"';
  return out;
}

bool is_json_value(std::string_view text) {
  // accept() reports errors by its result (no exception) and parses iteratively, so deeply
  // nested model output cannot overflow the stack.
  return nlohmann::json::accept(text);
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// What the scanner expects next outside strings.
enum class Expect { Value, KeyOrEnd, Key, Colon, CommaOrEnd };

}  // namespace

std::optional<std::string> json_closing_suffix(std::string_view text) {
  if (is_json_value(text)) return std::nullopt;
  std::vector<char> stack;  // '{' or '['
  Expect expect = Expect::Value;
  bool in_string = false, string_is_key = false, escape = false;
  int unicode_left = 0;  // hex digits still owed by a \u escape
  std::string scalar;    // a literal or number being read
  bool after_comma = false;

  auto after_value = [&] {
    expect = Expect::CommaOrEnd;
    after_comma = false;
  };
  for (char c : text) {
    if (in_string) {
      if (unicode_left > 0) {
        --unicode_left;
      } else if (escape) {
        escape = false;
        if (c == 'u') unicode_left = 4;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
        if (string_is_key)
          expect = Expect::Colon;
        else
          after_value();
      }
      continue;
    }
    if (!scalar.empty()) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-') {
        scalar += c;
        continue;
      }
      scalar.clear();
      after_value();
    }
    if (is_ws(c)) continue;
    switch (c) {
      case '{':
        if (expect != Expect::Value) return std::nullopt;
        stack.push_back('{');
        expect = Expect::KeyOrEnd;
        break;
      case '[':
        if (expect != Expect::Value) return std::nullopt;
        stack.push_back('[');
        expect = Expect::Value;
        after_comma = false;
        break;
      case '}':
      case ']':
        if (stack.empty() || stack.back() != (c == '}' ? '{' : '[')) return std::nullopt;
        stack.pop_back();
        after_value();
        break;
      case '"':
        in_string = true;
        string_is_key = expect == Expect::KeyOrEnd || expect == Expect::Key;
        if (!string_is_key && expect != Expect::Value) return std::nullopt;
        break;
      case ':':
        if (expect != Expect::Colon) return std::nullopt;
        expect = Expect::Value;
        after_comma = false;
        break;
      case ',':
        if (expect != Expect::CommaOrEnd || stack.empty()) return std::nullopt;
        expect = stack.back() == '{' ? Expect::Key : Expect::Value;
        after_comma = true;
        break;
      default:
        if (expect != Expect::Value) return std::nullopt;
        scalar = std::string(1, c);
        break;
    }
  }

  std::string suffix;
  if (in_string) {
    if (unicode_left > 0) suffix.append(static_cast<size_t>(unicode_left), '0');
    if (escape) suffix += '\\';  // the cut "\" becomes an escaped backslash
    suffix += '"';
    expect = string_is_key ? Expect::Colon : Expect::CommaOrEnd;
  } else if (!scalar.empty()) {
    // A cut literal is completed; a number cut after '.', 'e' or a sign gets a digit.
    for (std::string_view lit : {"true", "false", "null"})
      if (lit.size() > scalar.size() && lit.substr(0, scalar.size()) == scalar) suffix = lit.substr(scalar.size());
    const char first = scalar.front(), last = scalar.back();
    const bool number = first == '-' || (first >= '0' && first <= '9');
    if (number && (last == '.' || last == 'e' || last == 'E' || last == '+' || last == '-')) suffix = "0";
    expect = Expect::CommaOrEnd;
  }
  switch (expect) {
    case Expect::Colon: suffix += ": null"; break;
    case Expect::Value:
      // After a key's colon a null completes the member; at the start, or after a comma in an
      // array, there is nothing to close without inventing an element.
      if (stack.empty() || after_comma) return std::nullopt;
      if (stack.back() == '{') suffix += "null";
      break;
    case Expect::Key: return std::nullopt;  // trailing comma in an object
    case Expect::KeyOrEnd:
    case Expect::CommaOrEnd: break;
  }
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) suffix += *it == '{' ? '}' : ']';
  std::string whole(text);
  whole += suffix;
  if (!is_json_value(whole)) return std::nullopt;
  return suffix;
}

}  // namespace waste::reply
