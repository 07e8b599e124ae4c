// Schemas the compiler refuses: the error names the place (`where` + JSON pointer) and the
// keyword, so a client can fix its request.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "compute/constrain/json_schema.h"
#include "shared/util/error.h"

using namespace waste::constrain;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kWhere = "response_format.json_schema.schema";

std::string error_of(const std::string& text) {
  try {
    compile_json_schema(ojson::parse(text), kWhere);
  } catch (const waste::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("errors: unsupported keywords name the keyword and its path") {
  CHECK(error_of(R"({"type":"object","properties":{"age":{"type":"integer","multipleOf":3}}})") ==
        kWhere + "/properties/age: unsupported keyword \"multipleOf\"");
  CHECK(error_of(R"({"type":"object","properties":{"o":{"type":"object","minProperties":1}}})") ==
        kWhere + "/properties/o: unsupported keyword \"minProperties\"");
  CHECK(error_of(R"({"type":"number","exclusiveMinimum":0})") ==
        kWhere + ": exclusive bounds on a \"number\" are not supported (on an \"integer\" they are)");
  CHECK(error_of(R"({"type":"number","maximum":0.5})") ==
        kWhere + "/maximum: a non-integer \"maximum\" on a \"number\" is not supported");
  CHECK(error_of(R"({"type":"string","pattern":"^a+$"})") == kWhere + ": unsupported keyword \"pattern\"");
  CHECK(error_of(R"({"type":"array","items":{"type":"object","patternProperties":{"x":{}}}})") ==
        kWhere + "/items: unsupported keyword \"patternProperties\"");
  CHECK(error_of(R"({"$defs":{"a/b":{"type":"string","format":"email"}},"$ref":"#/$defs/a~1b"})") ==
        kWhere + "/$defs/a~1b/format: unsupported format \"email\" (supported: date, time, date-time, uuid)");
  CHECK(error_of(R"({"not":{"type":"null"}})") == kWhere + ": unsupported keyword \"not\"");
  CHECK(error_of(R"({"type":"array","uniqueItems":true})") == kWhere + "/uniqueItems: \"uniqueItems\": true is not supported");
  CHECK(error_of(R"({"type":"array","items":[{"type":"string"}]})") ==
        kWhere + "/items: \"items\" as an array (a tuple) is not supported");
  CHECK(error_of(R"({"allOf":[{"type":"string"},{"maxLength":3}]})") ==
        kWhere + "/allOf: \"allOf\" with more than one schema is not supported");
  CHECK(error_of(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/x","maxLength":2}},"$defs":{"x":{}}})") ==
        kWhere + "/properties/a: keyword \"maxLength\" beside \"$ref\" is not supported");
  CHECK(error_of(R"({"anyOf":[{"type":"string"}],"minLength":2})") ==
        kWhere + ": keyword \"minLength\" beside \"anyOf\" is not supported");
  CHECK(error_of(R"({"enum":["a","bb"],"maxLength":1})") ==
        kWhere + ": keyword \"maxLength\" beside \"enum\"/\"const\" is not supported");
}

TEST_CASE("errors: malformed or unsatisfiable schemas and bounds") {
  CHECK(error_of(R"({"$ref":"http://example.com/s.json"})") ==
        kWhere + "/$ref: only local references (\"#...\") are supported, not \"http://example.com/s.json\"");
  CHECK(error_of(R"({"$ref":"#/$defs/missing"})") == kWhere + "/$ref: cannot resolve \"#/$defs/missing\"");
  CHECK(error_of(R"({"$ref":"#"})").find("left recursion") != std::string::npos);
  CHECK(error_of(R"({"type":"object","properties":{"a":{}},"required":["b"]})") ==
        kWhere + "/required: required property \"b\" is not in \"properties\"");
  CHECK(error_of(R"({"type":"object","properties":{"a":false},"required":["a"]})").find("admits no JSON value") !=
        std::string::npos);
  CHECK(error_of(R"({"type":"strin"})") == kWhere + "/type: unknown type \"strin\"");
  CHECK(error_of(R"({"type":"string","maxLength":-1})") == kWhere + "/maxLength: \"maxLength\" must be a non-negative integer");
  CHECK(error_of(R"({"type":"string","maxLength":100000})") ==
        kWhere + "/maxLength: \"maxLength\" of 100000 is above the supported 4096");
  CHECK(error_of(R"({"type":"array","maxItems":5000})") ==
        kWhere + "/maxItems: \"maxItems\" of 5000 is above the supported 1024");
  CHECK(error_of(R"({"type":"integer","minimum":5,"maximum":4})").find("admits no JSON value") != std::string::npos);
  CHECK(error_of(R"(3)") == kWhere + ": a schema must be an object or a boolean, not number");
  // Nesting deeper than kMaxSchemaDepth.
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 70; ++i) {
    deep.insert(0, R"({"type":"array","items":)");  // (not a + b + c: GCC 12 warns falsely)
    deep += "}";
  }
  CHECK(error_of(deep).find("nested deeper than 64 levels") != std::string::npos);
  // Too many properties.
  ojson wide = {{"type", "object"}, {"properties", ojson::object()}};
  for (int i = 0; i < 300; ++i) wide["properties"][std::string("p").append(std::to_string(i))] = {{"type", "string"}};
  CHECK(error_of(wide.dump()) == kWhere + "/properties: more than 256 properties");
  // Recursion that needs more nesting than the parse stack holds: required self-reference.
  CHECK(error_of(R"({"$defs":{"n":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}},"required":["c"]}},
                   "$ref":"#/$defs/n"})")
            .find("admits no JSON value") != std::string::npos);
}

TEST_CASE("errors: annotations are ignored") {
  CHECK(error_of(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"T","description":"d",
                   "type":"object","properties":{"a":{"type":"string","default":"x","examples":["y"],
                   "x-extension":1}},"$comment":"c"})")
            .empty());
}
