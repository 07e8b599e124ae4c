// 200 generations driven by random logits (seeded, softmax sampling at random temperatures)
// over the o200k vocabulary, 20 for each of 10 schemas: every reply must end complete, parse
// with nlohmann::json and validate against its schema (constrain_fixture.cpp's validator).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "compute/constrain/grammar_matcher.h"
#include "tests/unit/constrain/constrain_fixture.h"

using namespace waste::constrain;
using ojson = nlohmann::ordered_json;

namespace {

const char* kSchemas[] = {
    // flat object
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string"}},
        "required":["name","age","email"],"additionalProperties":false})",
    // optional properties
    R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"number"},"c":{"type":"boolean"},
        "d":{"type":"null"}},"required":["b"],"additionalProperties":false})",
    // nested objects
    R"({"type":"object","properties":{"user":{"type":"object","properties":{"id":{"type":"integer"},
        "profile":{"type":"object","properties":{"nick":{"type":"string"},"score":{"type":"number"}},
        "required":["nick"],"additionalProperties":false}},"required":["id","profile"],"additionalProperties":false}},
        "required":["user"],"additionalProperties":false})",
    // arrays with min/max items
    R"({"type":"object","properties":{"xs":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":5},
        "pairs":{"type":"array","items":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":2},
        "maxItems":3}},"required":["xs","pairs"],"additionalProperties":false})",
    // enums of strings and numbers
    R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},"size":{"enum":[1,2.5,-3,100]},
        "mixed":{"enum":["a",1,null,true,{"k":[1]}]}},"required":["color","size","mixed"],
        "additionalProperties":false})",
    // integers
    R"({"type":"object","properties":{"i":{"type":"integer"},"list":{"type":"array","items":{"type":"integer"}},
        "age":{"type":"integer","minimum":0,"maximum":150},"delta":{"type":"integer","exclusiveMinimum":-10,
        "exclusiveMaximum":10},"ratio":{"type":"number","minimum":0,"maximum":1}},
        "required":["i","list","age","delta","ratio"],"additionalProperties":false})",
    // booleans and null
    R"({"type":"object","properties":{"flag":{"type":"boolean"},"nothing":{"type":"null"},
        "maybe":{"type":["boolean","null"]}},"required":["flag","nothing","maybe"],"additionalProperties":false})",
    // anyOf
    R"({"anyOf":[{"type":"string"},{"type":"object","properties":{"x":{"type":"number"}},"required":["x"],
        "additionalProperties":false},{"type":"array","items":{"type":"boolean"},"maxItems":3}]})",
    // $ref / $defs, recursive
    R"({"$defs":{"point":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},
        "required":["x","y"],"additionalProperties":false},
        "node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array",
        "items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value"],"additionalProperties":false}},
        "type":"object","properties":{"p":{"$ref":"#/$defs/point"},"tree":{"$ref":"#/$defs/node"}},
        "required":["p","tree"],"additionalProperties":false})",
    // strings with min/maxLength
    R"({"type":"object","properties":{"code":{"type":"string","minLength":2,"maxLength":8},
        "note":{"type":"string","maxLength":3}},"required":["code","note"],"additionalProperties":false})",
};

}  // namespace

TEST_CASE("random generation: 200 replies over o200k parse and validate") {
  const auto v = test::o200k_vocab();
  if (!v) return;
  std::mt19937_64 rng(20261201);
  int total = 0, tokens = 0, masks = 0;
  for (size_t k = 0; k < std::size(kSchemas); ++k) {
    const ojson schema = ojson::parse(kSchemas[k]);
    const auto g = compile_json_schema(schema, "schema " + std::to_string(k));
    for (int r = 0; r < 20; ++r) {
      const float temperature = 0.5f + float(rng() % 1000) / 1000.0f;
      const test::Generated out = test::generate(g, v, rng, temperature, 2000);
      CAPTURE(k);
      CAPTURE(out.text);
      REQUIRE(out.complete);
      ojson doc;
      REQUIRE_NOTHROW(doc = ojson::parse(out.text));
      CHECK(test::validate(doc, schema) == "");
      ++total;
      tokens += out.tokens;
      masks += out.masks;
    }
  }
  CHECK(total == 200);
  MESSAGE("200 replies, " << tokens << " tokens, " << masks << " masks");
}

TEST_CASE("random generation: json_object and the synthetic vocabulary") {
  std::mt19937_64 rng(7);
  for (int r = 0; r < 10; ++r) {
    const test::Generated out = test::generate(any_json_object(), test::synthetic_vocab(), rng, 1.0f, 3000);
    CAPTURE(out.text);
    REQUIRE(out.complete);
    ojson doc;
    REQUIRE_NOTHROW(doc = ojson::parse(out.text));
    CHECK(doc.is_object());
  }
}
