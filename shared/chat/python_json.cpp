#include "shared/chat/python_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "shared/reply/json_text.h"

namespace waste::chat {

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e[+-]XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e_at = s.find('e');
  std::string mant = s.substr(0, e_at);
  const int exp10 = std::stoi(s.substr(e_at + 1));
  std::string digits = mant;
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp10 < -4 || exp10 >= 16) {
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return sign + mant + e;
  }
  // Fixed notation: the point sits after digit exp10 + 1.
  const int point = exp10 + 1;
  std::string out;
  if (point <= 0) {
    out = "0." + std::string(size_t(-point), '0') + digits;
  } else if (size_t(point) >= digits.size()) {
    out = digits + std::string(size_t(point) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
  }
  return sign + out;
}

namespace {

// JSON's required escapes only, as Python writes them with ensure_ascii=False (\u00XX lowercase).
void dump_string(const std::string& s, std::string& out) {
  out += '"';
  reply::append_json_escaped(out, s);
  out += '"';
}

void dump(const Json& v, const PyDumpOptions& o, std::string& out) {
  const char* item_sep = o.compact ? "," : ", ";
  const char* key_sep = o.compact ? ":" : ": ";
  switch (v.type()) {
    case Json::value_t::null: out += "null"; break;
    case Json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case Json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case Json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case Json::value_t::number_float: out += py_float_repr(v.get<double>()); break;
    case Json::value_t::string: dump_string(v.get_ref<const std::string&>(), out); break;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& x : v) {
        if (!first) out += item_sep;
        first = false;
        dump(x, o, out);
      }
      out += ']';
      break;
    }
    case Json::value_t::object: {
      std::vector<std::pair<const std::string*, const Json*>> items;
      for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(&it.key(), &it.value());
      // Byte order of UTF-8 is code point order, which is how Python sorts str keys.
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
      out += '{';
      bool first = true;
      for (const auto& [k, x] : items) {
        if (!first) out += item_sep;
        first = false;
        dump_string(*k, out);
        out += key_sep;
        dump(*x, o, out);
      }
      out += '}';
      break;
    }
    case Json::value_t::binary:
    case Json::value_t::discarded: out += "null"; break;
  }
}

}  // namespace

std::string py_dumps(const Json& value, const PyDumpOptions& o) {
  std::string out;
  dump(value, o, out);
  return out;
}

}  // namespace waste::chat
