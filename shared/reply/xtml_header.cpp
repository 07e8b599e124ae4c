#include "shared/reply/xtml_header.h"

namespace waste::reply {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '-';
}
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void skip_space(std::string_view s, size_t& i) {
  while (i < s.size() && is_space(s[i])) ++i;
}

std::string read_name(std::string_view s, size_t& i) {
  const size_t b = i;
  while (i < s.size() && is_name_char(s[i])) ++i;
  return std::string(s.substr(b, i - b));
}

std::string unescape(std::string_view v) {
  static constexpr std::pair<std::string_view, char> kEntities[] = {
      {"&quot;", '"'}, {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&apos;", '\''}};
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    bool matched = false;
    if (v[i] == '&') {
      for (const auto& [entity, ch] : kEntities) {
        if (v.substr(i, entity.size()) == entity) {
          out += ch;
          i += entity.size();
          matched = true;
          break;
        }
      }
    }
    if (!matched) out += v[i++];
  }
  return out;
}

// One `key=value` at s[i]; false if it does not parse.
bool read_attribute(std::string_view s, size_t& i, std::string& key, std::string& value) {
  key = read_name(s, i);
  if (key.empty()) return false;
  skip_space(s, i);
  if (i >= s.size() || s[i] != '=') return false;
  ++i;
  skip_space(s, i);
  if (i >= s.size()) return false;
  if (s[i] == '"' || s[i] == '\'') {
    const char q = s[i++];
    const size_t end = s.find(q, i);
    if (end == std::string_view::npos) return false;
    value = unescape(s.substr(i, end - i));
    i = end + 1;
  } else {
    const size_t b = i;
    while (i < s.size() && !is_space(s[i]) && s[i] != '"' && s[i] != '\'') ++i;
    if (i == b) return false;
    value = unescape(s.substr(b, i - b));
  }
  return true;
}

}  // namespace

const std::string* XtmlHeader::get(std::string_view key) const {
  for (const auto& [k, v] : attributes)
    if (k == key) return &v;
  return nullptr;
}

std::optional<XtmlHeader> parse_xtml_header(std::string_view text) {
  size_t i = 0;
  skip_space(text, i);
  XtmlHeader h;
  h.name = read_name(text, i);
  if (h.name.empty()) return std::nullopt;
  while (true) {
    const size_t before = i;
    skip_space(text, i);
    if (i >= text.size()) break;
    std::string key, value;
    // Attributes are separated from the name and each other by whitespace.
    if (i == before || h.attributes.size() >= kMaxHeaderAttributes || !read_attribute(text, i, key, value)) {
      h.attributes_ok = false;
      break;
    }
    h.attributes.emplace_back(std::move(key), std::move(value));
  }
  return h;
}

std::optional<std::string> parse_xtml_close_name(std::string_view text) {
  size_t i = 0;
  skip_space(text, i);
  std::string name = read_name(text, i);
  skip_space(text, i);
  if (name.empty() || i != text.size()) return std::nullopt;
  return name;
}

}  // namespace waste::reply
