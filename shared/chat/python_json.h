// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it, because the K3
// prompt encoder (encoding_k3.py) embeds json.dumps output in prompts: tool declarations and
// schemas compact with sorted keys, typed tool-call arguments with the default ", " / ": "
// separators in the order the client wrote them. nlohmann's own dump differs in float formatting
// (1e15 vs 1000000000000000.0) and, for nlohmann::json, in key order.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace waste::chat {

using Json = nlohmann::ordered_json;  // keeps the client's key order

struct PyDumpOptions {
  bool compact = false;    // separators (",", ":") instead of (", ", ": ")
  bool sort_keys = false;  // keys in code point order at every depth (deep_sort_dict)
};

std::string py_dumps(const Json& value, const PyDumpOptions& o = {});

// repr(float) of Python 3: the shortest digits that round-trip, fixed notation for decimal
// exponents in [-4, 16), else d.ddde+XX; a whole number gets ".0".
std::string py_float_repr(double x);

}  // namespace waste::chat
