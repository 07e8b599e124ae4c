// The building blocks: UTF-8 holding, JSON escaping/checking/closing, K3 headers, Kimi names.
#include <doctest/doctest.h>

#include "shared/reply/json_text.h"
#include "shared/reply/kimi_call_name.h"
#include "shared/reply/utf8_text.h"
#include "shared/reply/xtml_header.h"

using namespace waste::reply;

TEST_CASE("utf8: split characters are held, ill-formed bytes become U+FFFD") {
  std::string held;
  const std::string euro = "\xe2\x82\xac", smile = "\xf0\x9f\x98\x80";
  CHECK(utf8_take_complete(held, "a\xe2") == "a");
  CHECK(held == "\xe2");
  CHECK(utf8_take_complete(held, "\x82") == "");
  CHECK(utf8_take_complete(held,
                           "\xac"
                           "b") == euro + "b");
  CHECK(held.empty());
  CHECK(utf8_take_complete(held, smile.substr(0, 1)) == "");
  CHECK(utf8_take_complete(held, smile.substr(1, 2)) == "");
  CHECK(utf8_take_complete(held, smile.substr(3)) == smile);
  // Ill-formed: lone continuation, overlong, surrogate, above U+10FFFF, broken sequence.
  const std::string r(kReplacementChar);
  CHECK(utf8_take_complete(held, "\x80") == r);
  CHECK(utf8_take_complete(held, "\xc0\xaf") == r + r);
  CHECK(utf8_take_complete(held, "\xed\xa0\x80") == r + r + r);
  CHECK(utf8_take_complete(held, "\xf4\x90\x80\x80") == r + r + r + r);
  CHECK(utf8_take_complete(held, "\xe2\x82x") == r + "x");
  CHECK(utf8_take_complete(held, "\xff") == r);
  CHECK(held.empty());
  // A tail that can never complete is flushed as one U+FFFD.
  CHECK(utf8_take_complete(held, "z\xf0\x9f") == "z");
  CHECK(utf8_flush(held) == r);
  CHECK(utf8_flush(held) == "");
}

TEST_CASE("json: escaping pieces, checking values") {
  CHECK(json_quote("a\"b\\c\nd\x01") == "\"a\\\"b\\\\c\\nd\\u0001\"");
  // Escaping is piecewise: what makes streaming string values possible.
  std::string a, b;
  append_json_escaped(a, "x\"\\\ty");
  append_json_escaped(b, "x\"");
  append_json_escaped(b, "\\\ty");
  CHECK(a == b);
  CHECK(is_json_value("42"));
  CHECK(is_json_value(" {\"k\": [1, null]} "));
  CHECK_FALSE(is_json_value(""));
  CHECK_FALSE(is_json_value("forty"));
  CHECK_FALSE(is_json_value("1 2"));
  CHECK_FALSE(is_json_value("{\"a\": 1,}"));
  // Deep nesting does not overflow the stack.
  CHECK(is_json_value(std::string(100000, '[') + std::string(100000, ']')));
}

TEST_CASE("json: closing text cut by generation") {
  auto close = [](std::string_view s) { return json_closing_suffix(s).value_or("<none>"); };
  CHECK(close("{\"city\": \"Par") == "\"}");
  CHECK(close("{\"a\": [1, 2") == "]}");
  CHECK(close("{\"a\": ") == "null}");
  CHECK(close("{\"a\"") == ": null}");
  CHECK(close("{\"a") == "\": null}");
  CHECK(close("{") == "}");
  CHECK(close("[") == "]");
  CHECK(close("{\"a\": tru") == "e}");
  CHECK(close("{\"a\": nu") == "ll}");
  CHECK(close("{\"a\": 1.") == "0}");
  CHECK(close("{\"a\": -") == "0}");
  CHECK(close("{\"a\": 12") == "}");
  CHECK(close("{\"a\": \"x\\") == "\\\"}");
  CHECK(close("{\"a\": \"\\u00e") == "0\"}");
  CHECK(close("[{\"a\": {\"b\": [true") == "]}}]");
  // Never invents keys or elements; already complete or broken text gets nothing.
  CHECK(close("{\"a\": 1,") == "<none>");
  CHECK(close("[1,") == "<none>");
  CHECK(close("") == "<none>");
  CHECK(close("{\"a\": 1}") == "<none>");
  CHECK(close("{\"a\" 1") == "<none>");
  CHECK(close("}") == "<none>");
  CHECK(close("oops") == "<none>");
}

TEST_CASE("xtml headers") {
  auto h = parse_xtml_header("call tool=\"get_weather\" index=\"1\"");
  REQUIRE(h);
  CHECK(h->name == "call");
  CHECK(h->attributes_ok);
  REQUIRE(h->get("tool"));
  CHECK(*h->get("tool") == "get_weather");
  CHECK(*h->get("index") == "1");
  CHECK(h->get("key") == nullptr);

  h = parse_xtml_header("message role=\"user\" name=\"He said &quot;hello&quot; &amp; left &x;\"");
  REQUIRE(h);
  CHECK(*h->get("name") == "He said \"hello\" & left &x;");
  h = parse_xtml_header("  argument  key='k'   type=string ");
  REQUIRE(h);
  CHECK(h->attributes_ok);
  CHECK(*h->get("key") == "k");
  CHECK(*h->get("type") == "string");
  h = parse_xtml_header("think");
  REQUIRE(h);
  CHECK(h->attributes.empty());

  // Broken attributes: the name stays usable, the attributes are flagged.
  for (const char* bad :
       {"call tool=\"x", "call tool", "call =\"x\"", "call tool=\"x\"index=\"1\"", "call tool=", "call \xe2\x82\xac"}) {
    INFO(bad);
    h = parse_xtml_header(bad);
    REQUIRE(h);
    CHECK(h->name == "call");
    CHECK_FALSE(h->attributes_ok);
  }
  CHECK_FALSE(parse_xtml_header(""));
  CHECK_FALSE(parse_xtml_header("  "));
  CHECK_FALSE(parse_xtml_header("\"call\""));

  CHECK(parse_xtml_close_name(" think ").value_or("") == "think");
  CHECK_FALSE(parse_xtml_close_name("think x"));
  CHECK_FALSE(parse_xtml_close_name(""));
}

TEST_CASE("kimi call names") {
  auto n = parse_kimi_call_name("functions.get_weather:0");
  REQUIRE(n);
  CHECK(n->id == "functions.get_weather:0");
  CHECK(n->name == "get_weather");
  CHECK(n->has_index);
  n = parse_kimi_call_name(" get_weather:12\n");
  REQUIRE(n);
  CHECK(n->id == "get_weather:12");
  CHECK(n->name == "get_weather");
  n = parse_kimi_call_name("functions.search");
  REQUIRE(n);
  CHECK(n->name == "search");
  CHECK_FALSE(n->has_index);
  n = parse_kimi_call_name("ns:tool:x");  // ':' not followed by digits is part of the name
  REQUIRE(n);
  CHECK(n->name == "ns:tool:x");
  CHECK_FALSE(parse_kimi_call_name(""));
  CHECK_FALSE(parse_kimi_call_name("functions.:3"));
  CHECK_FALSE(parse_kimi_call_name(" \n"));
}
