#include "compute/constrain/json_syntax.h"

#include "shared/util/error.h"

namespace waste::constrain::json {

namespace {

ExprPtr lit(std::string_view s) { return e_literal(s); }

}  // namespace

ExprPtr char_class(std::string_view spec) {
  std::vector<ByteRange> r;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (i + 2 < spec.size() && spec[i + 1] == '-') {
      r.push_back({uint8_t(spec[i]), uint8_t(spec[i + 2])});
      i += 2;
    } else {
      r.push_back({uint8_t(spec[i]), uint8_t(spec[i])});
    }
  }
  return e_bytes(std::move(r));
}

ExprPtr whitespace() {
  static const ExprPtr ws =
      e_alt({e_empty(), e_byte(' '), e_seq({e_byte('\n'), e_repeat(char_class(" \t"), 0, kMaxIndent)})});
  return ws;
}

ExprPtr ascii_char() {
  static const ExprPtr c = e_bytes({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F}});
  return c;
}

ExprPtr long_char() {
  static const ExprPtr c = [] {
    const ExprPtr cont = e_range(0x80, 0xBF);
    const ExprPtr hex = char_class("0-9A-Fa-f");
    // \u escapes of one code point: surrogates only as a high-low pair (a lone one does not parse).
    const ExprPtr non_surrogate = e_alt({e_seq({char_class("0-9A-Ca-c"), hex, hex, hex}),
                                         e_seq({char_class("Dd"), char_class("0-7"), hex, hex}),
                                         e_seq({char_class("E-Fe-f"), hex, hex, hex})});
    const ExprPtr pair = e_seq({char_class("Dd"), char_class("89ABab"), hex, hex, lit("\\u"), char_class("Dd"),
                                char_class("C-Fc-f"), hex, hex});
    const ExprPtr escape = e_seq({e_byte('\\'), e_alt({char_class("\"\\/bfnrt"), e_seq({e_byte('u'), e_alt({non_surrogate, pair})})})});
    return e_alt({
        e_seq({e_range(0xC2, 0xDF), cont}),
        e_seq({e_byte(0xE0), e_range(0xA0, 0xBF), cont}),
        e_seq({e_bytes({{0xE1, 0xEC}, {0xEE, 0xEF}}), cont, cont}),
        e_seq({e_byte(0xED), e_range(0x80, 0x9F), cont}),
        e_seq({e_byte(0xF0), e_range(0x90, 0xBF), cont, cont}),
        e_seq({e_range(0xF1, 0xF3), cont, cont, cont}),
        e_seq({e_byte(0xF4), e_range(0x80, 0x8F), cont, cont}),
        escape,
    });
  }();
  return c;
}

ExprPtr string_char() {
  static const ExprPtr c = e_alt({ascii_char(), long_char()});
  return c;
}

ExprPtr string_body(uint32_t min_chars, uint32_t max_chars) {
  return e_seq({e_byte('"'), e_repeat(string_char(), min_chars, max_chars), e_byte('"')});
}

ExprPtr integer() {
  static const ExprPtr i = e_seq({e_opt(e_byte('-')),
                                  e_alt({e_byte('0'), e_seq({e_range('1', '9'),
                                                             e_repeat(e_range('0', '9'), 0, kMaxIntegerDigits - 1)})})});
  return i;
}

ExprPtr number() {
  static const ExprPtr n = e_seq({integer(), e_opt(e_seq({e_byte('.'), e_repeat(e_range('0', '9'), 1, kUnbounded)})),
                                  e_opt(e_seq({char_class("eE"), e_opt(char_class("+-")),
                                               e_repeat(e_range('0', '9'), 1, 2)}))});
  return n;
}

ExprPtr literal(const nlohmann::ordered_json& v) { return e_literal(v.dump()); }

ExprPtr format_body(std::string_view name) {
  const ExprPtr d = e_range('0', '9');
  if (name == "date" || name == "date-time") {
    // Days per month without February 29 (valid in every year).
    const ExprPtr day31 = e_alt({e_seq({e_byte('0'), e_range('1', '9')}), e_seq({char_class("12"), d}), lit("30"), lit("31")});
    const ExprPtr day30 = e_alt({e_seq({e_byte('0'), e_range('1', '9')}), e_seq({char_class("12"), d}), lit("30")});
    const ExprPtr day28 = e_alt({e_seq({e_byte('0'), e_range('1', '9')}), e_seq({e_byte('1'), d}),
                                 e_seq({e_byte('2'), e_range('0', '8')})});
    const ExprPtr md = e_alt({e_seq({e_alt({e_seq({e_byte('0'), char_class("13578")}), lit("10"), lit("12")}), e_byte('-'), day31}),
                              e_seq({e_alt({e_seq({e_byte('0'), char_class("469")}), lit("11")}), e_byte('-'), day30}),
                              e_seq({lit("02-"), day28})});
    const ExprPtr date = e_seq({d, d, d, d, e_byte('-'), md});
    if (name == "date") return date;
    return e_seq({date, e_byte('T'), format_body("time")});
  }
  if (name == "time") {
    const ExprPtr hh = e_alt({e_seq({char_class("01"), d}), e_seq({e_byte('2'), e_range('0', '3')})});
    const ExprPtr mm = e_seq({e_range('0', '5'), d});
    return e_seq({hh, e_byte(':'), mm, e_byte(':'), mm, e_opt(e_seq({e_byte('.'), e_repeat(d, 1, 9)})),
                  e_alt({e_byte('Z'), e_seq({char_class("+-"), hh, e_byte(':'), mm})})});
  }
  if (name == "uuid") {
    const ExprPtr h = char_class("0-9a-f");
    return e_seq({e_repeat(h, 8, 8), e_byte('-'), e_repeat(h, 4, 4), e_byte('-'), e_repeat(h, 4, 4), e_byte('-'),
                  e_repeat(h, 4, 4), e_byte('-'), e_repeat(h, 12, 12)});
  }
  return nullptr;
}

}  // namespace waste::constrain::json
