// The grammar at byte level: hand-written documents that must be accepted (whole and valid:
// complete()) or rejected (a byte refused, or the document not complete).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "compute/constrain/grammar_matcher.h"
#include "tests/unit/constrain/constrain_fixture.h"

using namespace waste::constrain;
using ojson = nlohmann::ordered_json;

namespace {

// A byte-level verdict: true if every byte is accepted and the document is complete.
bool whole(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  GrammarMatcher m(g, test::synthetic_vocab());
  return m.accept_bytes(doc) && m.complete();
}

std::shared_ptr<const Grammar> schema(const char* text) { return compile_json_schema(ojson::parse(text), "test"); }

}  // namespace

TEST_CASE("bytes: flat object with required properties in order") {
  const auto g = schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
                            "required":["name","age"],"additionalProperties":false})");
  CHECK(whole(g, R"({"name":"Ann","age":31})"));
  CHECK(whole(g, R"({"name": "Ann", "age": -7})"));
  CHECK(whole(g, "{\n  \"name\": \"\",\n  \"age\": 0\n}"));
  CHECK(whole(g, R"({"name":"caf\u00e9 \"q\" \\ \/ \b\f\n\r\t","age":1})"));
  CHECK(whole(g, "{\"name\":\"\xE2\x82\xAC \xF0\x9F\x98\x80 \\ud83d\\ude00\",\"age\":1}"));
  CHECK_FALSE(whole(g, R"({"name":"Ann"})"));                    // age missing
  CHECK_FALSE(whole(g, R"({"age":31,"name":"Ann"})"));           // not in schema order (documented)
  CHECK_FALSE(whole(g, R"({"name":"Ann","age":31,"x":1})"));     // extra property
  CHECK_FALSE(whole(g, R"({"name":"Ann","age":31.5})"));         // not an integer
  CHECK_FALSE(whole(g, R"({"name":"Ann","age":1e3})"));
  CHECK_FALSE(whole(g, R"({"name":"Ann","age":031})"));          // leading zero
  CHECK_FALSE(whole(g, R"({"name":"Ann","age":31,})"));          // trailing comma
  CHECK_FALSE(whole(g, R"({"name":"A\x","age":1})"));            // bad escape
  CHECK_FALSE(whole(g, R"({"name":"\ud800","age":1})"));         // lone surrogate
  CHECK_FALSE(whole(g, "{\"name\":\"a\tb\",\"age\":1}"));        // raw control character
  CHECK_FALSE(whole(g, "{\"name\":\"\xC0\xAF\",\"age\":1}"));    // overlong UTF-8
  CHECK_FALSE(whole(g, "{\"name\":\"\xED\xA0\x80\",\"age\":1}"));  // UTF-8 surrogate
  CHECK_FALSE(whole(g, R"({  "name":"Ann","age":1})"));          // two spaces: one gap at most
  CHECK_FALSE(whole(g, R"( {"name":"Ann","age":1})"));           // no leading whitespace
  CHECK_FALSE(whole(g, R"({"name":"Ann","age":1} )"));           // none trailing
  CHECK_FALSE(whole(g, R"({"name":"Ann","age":1234567890123456789})"));  // 19 digits: beyond int64 safety
  CHECK(whole(g, R"({"name":"Ann","age":123456789012345678})"));
}

TEST_CASE("bytes: optional properties may be skipped, never reordered") {
  const auto g = schema(R"({"properties":{"a":{"type":"string"},"b":{"type":"number"},"c":{"type":"boolean"}},
                            "required":["b"]})");
  CHECK(whole(g, R"({"b":1})"));
  CHECK(whole(g, R"({"a":"x","b":1.5e-3})"));
  CHECK(whole(g, R"({"b":-0.25,"c":true})"));
  CHECK(whole(g, R"({"a":"","b":2E+10,"c":false})"));
  CHECK_FALSE(whole(g, R"({})"));
  CHECK_FALSE(whole(g, R"({"a":"x","c":true})"));
  CHECK_FALSE(whole(g, R"({"c":true,"b":1})"));
  CHECK_FALSE(whole(g, R"({"b":1.})"));
  CHECK_FALSE(whole(g, R"({"b":1e999})"));  // three exponent digits: could overflow a double
}

TEST_CASE("bytes: arrays, enums, const, anyOf, null") {
  const auto arr = schema(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  CHECK(whole(arr, "[1,2]"));
  CHECK(whole(arr, "[1, 2, 3]"));
  CHECK_FALSE(whole(arr, "[1]"));
  CHECK_FALSE(whole(arr, "[1,2,3,4]"));
  CHECK_FALSE(whole(arr, "[]"));
  const auto any_arr = schema(R"({"type":"array"})");
  CHECK(whole(any_arr, "[]"));
  CHECK(whole(any_arr, R"([1,"a",{"k":[null,true]},[]])"));
  const auto e = schema(R"({"enum":["red","green",1.5,null,{"k":[1,2]}]})");
  CHECK(whole(e, R"("red")"));
  CHECK(whole(e, "1.5"));
  CHECK(whole(e, "null"));
  CHECK(whole(e, R"({"k":[1,2]})"));
  CHECK_FALSE(whole(e, R"("blue")"));
  CHECK_FALSE(whole(e, R"("re")"));
  const auto typed_enum = schema(R"({"type":"string","enum":["a",1,"b"]})");
  CHECK(whole(typed_enum, R"("a")"));
  CHECK_FALSE(whole(typed_enum, "1"));  // excluded by "type"
  const auto c = schema(R"({"const":"fixed"})");
  CHECK(whole(c, R"("fixed")"));
  CHECK_FALSE(whole(c, R"("fixe")"));
  const auto alt = schema(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer"},{"type":"null"}]})");
  CHECK(whole(alt, R"("ab")"));
  CHECK(whole(alt, "-12"));
  CHECK(whole(alt, "null"));
  CHECK_FALSE(whole(alt, R"("abc")"));
  CHECK_FALSE(whole(alt, "true"));
  const auto types = schema(R"({"type":["boolean","null"]})");
  CHECK(whole(types, "false"));
  CHECK(whole(types, "null"));
  CHECK_FALSE(whole(types, "0"));
}

TEST_CASE("bytes: string lengths count characters, escapes included") {
  const auto g = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK(whole(g, R"("ab")"));
  CHECK(whole(g, "\"\xE2\x82\xAC\xE2\x82\xAC\xE2\x82\xAC\""));  // 3 characters, 9 bytes
  CHECK(whole(g, R"("\n\u0041\t")"));
  CHECK(whole(g, R"("a\ud83d\ude00")"));  // a surrogate pair is one character
  CHECK_FALSE(whole(g, R"("a")"));
  CHECK_FALSE(whole(g, R"("abcd")"));
}

TEST_CASE("bytes: formats") {
  const auto date = schema(R"({"type":"string","format":"date"})");
  CHECK(whole(date, R"("2026-12-01")"));
  CHECK(whole(date, R"("2024-02-28")"));
  CHECK_FALSE(whole(date, R"("2026-02-30")"));
  CHECK_FALSE(whole(date, R"("2026-13-01")"));
  const auto dt = schema(R"({"type":"string","format":"date-time"})");
  CHECK(whole(dt, R"("2026-12-01T23:59:59.5+01:00")"));
  CHECK(whole(dt, R"("2026-12-01T00:00:00Z")"));
  CHECK_FALSE(whole(dt, R"("2026-12-01T24:00:00Z")"));
  const auto uuid = schema(R"({"type":"string","format":"uuid"})");
  CHECK(whole(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  CHECK_FALSE(whole(uuid, R"("123e4567-e89b-12d3-a456-42661417400")"));
}

TEST_CASE("bytes: $ref, recursion bounded by the stack, json_object") {
  const auto g = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                              "next":{"$ref":"#/$defs/node"}},"required":["v"]}},"$ref":"#/$defs/node"})");
  CHECK(whole(g, R"({"v":1})"));
  CHECK(whole(g, R"({"v":1,"next":{"v":2,"next":{"v":3}}})"));
  CHECK_FALSE(whole(g, R"({"v":1,"next":{}})"));
  // Recursion: the parse stack is bounded, and the matcher never enters a state it cannot finish.
  GrammarMatcher deep(g, test::synthetic_vocab());
  int levels = 0;
  while (deep.accept_bytes(R"({"v":1,"next":)")) ++levels;
  CHECK(levels > 10);
  CHECK(levels < int(kMaxStackDepth));
  CHECK(deep.accept_bytes(R"({"v":1)"));
  for (int i = 0; i <= levels; ++i) REQUIRE(deep.accept_bytes("}"));
  CHECK(deep.complete());
  CHECK_FALSE(deep.can_continue());

  const auto obj = any_json_object();
  CHECK(whole(obj, "{}"));
  CHECK(whole(obj, R"({"a":[1,2,{"b":null}],"c":"d","a":-1.5e+7})"));
  CHECK_FALSE(whole(obj, "[]"));
  CHECK_FALSE(whole(obj, R"("x")"));
  GrammarMatcher nest(obj, test::synthetic_vocab());
  REQUIRE(nest.accept_bytes(R"({"k":)"));
  int depth = 0;
  while (nest.accept_bytes("[")) ++depth;
  CHECK(depth > 30);
  for (int i = 0; i < depth; ++i) REQUIRE(nest.accept_bytes("]"));
  REQUIRE(nest.accept_bytes("}"));
  CHECK(nest.complete());

  const auto any = compile_json_schema(ojson::parse("{}"), "test");
  CHECK(whole(any, "3"));
  CHECK(whole(any, R"(["x"])"));
  const auto t = compile_json_schema(ojson(true), "test");
  CHECK(whole(t, "null"));
}

TEST_CASE("bytes: integer and number bounds, exhaustively on a window") {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 40; ++round) {
    // Random bounds (some missing, some exclusive, some draft-4 style) around a random centre.
    const int64_t c = int64_t(rng() % 2001) - 1000;
    const int64_t lo = c - int64_t(rng() % 300), hi = c + int64_t(rng() % 300);
    ojson s = {{"type", "integer"}};
    const int kind = int(rng() % 4);
    int64_t a = lo, b = hi;
    if (kind == 0) s["minimum"] = lo, s["maximum"] = hi;
    if (kind == 1) s["exclusiveMinimum"] = lo, s["exclusiveMaximum"] = hi, a = lo + 1, b = hi - 1;
    if (kind == 2) s["minimum"] = lo, b = INT64_MAX;
    if (kind == 3) s["maximum"] = double(hi) + 0.5, a = INT64_MIN;
    CAPTURE(s.dump());
    const auto g = compile_json_schema(s, "test");
    for (int64_t x = c - 400; x <= c + 400; ++x) {
      CAPTURE(x);
      REQUIRE(whole(g, std::to_string(x)) == (x >= a && x <= b));
    }
    CHECK_FALSE(whole(g, "-0"));
  }
  const auto big = compile_json_schema(ojson::parse(R"({"type":"integer","minimum":1000000000000})"), "test");
  CHECK(whole(big, "1000000000000"));
  CHECK(whole(big, "999999999999999999"));
  CHECK_FALSE(whole(big, "999999999999"));
  CHECK_FALSE(whole(big, "-1000000000000"));
  const auto nonneg = compile_json_schema(ojson::parse(R"({"type":"integer","minimum":0})"), "test");
  CHECK(whole(nonneg, "0"));
  CHECK_FALSE(whole(nonneg, "-1"));
}

TEST_CASE("bytes: number bounds") {
  const auto unit = compile_json_schema(ojson::parse(R"({"type":"number","minimum":0,"maximum":1})"), "test");
  for (const char* ok : {"0", "0.5", "0.999", "1", "1.000", "0.0"}) CHECK(whole(unit, ok));
  for (const char* bad : {"-0.5", "1.0001", "2", "1e-3", "-1"}) CHECK_FALSE(whole(unit, bad));
  const auto neg = compile_json_schema(ojson::parse(R"({"type":"number","minimum":-5,"maximum":-2})"), "test");
  for (const char* ok : {"-5", "-2", "-3.75", "-4.999", "-5.0", "-2.0"}) CHECK(whole(neg, ok));
  for (const char* bad : {"-5.1", "-1.99", "0", "-1.5", "-6"}) CHECK_FALSE(whole(neg, bad));
  const auto half = compile_json_schema(ojson::parse(R"({"type":"number","minimum":-1})"), "test");
  for (const char* ok : {"-1", "-0.5", "-0", "0", "123456.75"}) CHECK(whole(half, ok));
  for (const char* bad : {"-1.5", "-2"}) CHECK_FALSE(whole(half, bad));
  // Numbers: a random sample against the bounds.
  std::mt19937_64 rng(9);
  const auto g = compile_json_schema(ojson::parse(R"({"type":"number","minimum":-30,"maximum":70})"), "test");
  for (int i = 0; i < 2000; ++i) {
    const double x = double(int64_t(rng() % 200001) - 100000) / 1000.0;
    char text[64];
    std::snprintf(text, sizeof text, "%.3f", x);
    CAPTURE(text);
    const double v = std::strtod(text, nullptr);
    REQUIRE(whole(g, text) == (v >= -30 && v <= 70));
  }
}
