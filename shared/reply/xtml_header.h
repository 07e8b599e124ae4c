// K3 element headers: the ordinary text between <|open|> and <|sep|>, `name key="value" ...`,
// and the tag name between <|close|> and <|sep|>.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace waste::reply {

inline constexpr size_t kMaxHeaderAttributes = 32;

struct XtmlHeader {
  std::string name;
  // False when the text after the name did not parse (the name is still usable: a `think` with
  // a garbled attribute is still a think, a `call` without a readable tool="..." is dropped).
  bool attributes_ok = true;
  std::vector<std::pair<std::string, std::string>> attributes;  // values unescaped
  const std::string* get(std::string_view key) const;
};

// Names are [A-Za-z0-9_.:-]+. Attribute values are "double-quoted" (the renderer's form) or, as
// tolerance, 'single-quoted' or bare (up to whitespace); &quot; &amp; &lt; &gt; &apos; are
// unescaped, any other '&' is kept. Whitespace around the parts is allowed. nullopt: no name.
std::optional<XtmlHeader> parse_xtml_header(std::string_view text);

// The tag name of a close (whitespace trimmed), or nullopt if it is not a name.
std::optional<std::string> parse_xtml_close_name(std::string_view text);

}  // namespace waste::reply
