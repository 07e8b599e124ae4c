// py_dumps against what Python's json.dumps(ensure_ascii=False) writes (values checked by hand
// against CPython 3.11).
#include <doctest/doctest.h>

#include "shared/chat/python_json.h"

using namespace waste::chat;

TEST_CASE("floats as Python's repr") {
  CHECK(py_float_repr(1.5) == "1.5");
  CHECK(py_float_repr(1.0) == "1.0");
  CHECK(py_float_repr(-0.0) == "-0.0");
  CHECK(py_float_repr(100000.0) == "100000.0");
  CHECK(py_float_repr(1e15) == "1000000000000000.0");
  CHECK(py_float_repr(1e16) == "1e+16");
  CHECK(py_float_repr(1.25e16) == "1.25e+16");
  CHECK(py_float_repr(0.0001) == "0.0001");
  CHECK(py_float_repr(0.00001) == "1e-05");
  CHECK(py_float_repr(1.5e-7) == "1.5e-07");
  CHECK(py_float_repr(0.1) == "0.1");
  CHECK(py_float_repr(123.456) == "123.456");
  CHECK(py_float_repr(1e300) == "1e+300");
  CHECK(py_float_repr(-2.5e-300) == "-2.5e-300");
}

TEST_CASE("dumps: separators, key order, escapes") {
  const Json j = Json::parse(R"({"b": [1, "two", null, true, 2.50], "a": {"z": 1, "y": "é\n\u0001\"\\"}})");
  CHECK(py_dumps(j) == R"({"b": [1, "two", null, true, 2.5], "a": {"z": 1, "y": "é\n\u0001\"\\"}})");
  CHECK(py_dumps(j, {.compact = true, .sort_keys = true}) == R"({"a":{"y":"é\n\u0001\"\\","z":1},"b":[1,"two",null,true,2.5]})");
  CHECK(py_dumps(Json::parse("[]")) == "[]");
  CHECK(py_dumps(Json::parse("{}")) == "{}");
  CHECK(py_dumps(Json::parse("-12")) == "-12");
  CHECK(py_dumps(Json::parse("18446744073709551615")) == "18446744073709551615");
  CHECK(py_dumps(Json::parse("\"/\\u007f\"")) == "\"/\x7f\"");
}
