#include "shared/reply/kimi_call_name.h"

namespace waste::reply {

std::optional<KimiCallName> parse_kimi_call_name(std::string_view text) {
  const auto ws = " \t\r\n";
  const size_t b = text.find_first_not_of(ws);
  if (b == std::string_view::npos) return std::nullopt;
  text = text.substr(b, text.find_last_not_of(ws) - b + 1);
  KimiCallName out;
  out.id = std::string(text);
  std::string_view name = text;
  if (name.starts_with("functions.")) name.remove_prefix(10);
  const size_t colon = name.rfind(':');
  if (colon != std::string_view::npos && colon + 1 < name.size() &&
      name.substr(colon + 1).find_first_not_of("0123456789") == std::string_view::npos) {
    name = name.substr(0, colon);
    out.has_index = true;
  }
  if (name.empty()) return std::nullopt;
  out.name = std::string(name);
  return out;
}

}  // namespace waste::reply
