// How an Error crosses Cap'n Proto RPC with its kind. Cap'n Proto 0.9 carries only an exception
// type and a description, so the kind and the request field at fault travel in a fixed prefix
// of the description, the parameter length-prefixed (a field name such as "messages[0]" may hold
// any character):
//
//   [waste-error invalid_request 11:messages[0]] the message
//
// A description without the prefix (another server, an older WASTE) decodes as Internal with
// the whole text as the message.
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

#include "shared/util/error.h"

namespace waste::ipc {

constexpr std::string_view kErrorPrefix = "[waste-error ";

inline std::string encode_error(ErrorKind kind, const std::string& param, const std::string& message) {
  return std::string(kErrorPrefix) + std::string(error_kind_name(kind)) + " " + std::to_string(param.size()) + ":" +
         param + "] " + message;
}

struct DecodedError {
  bool typed = false;  // the prefix was there
  ErrorKind kind = ErrorKind::Internal;
  std::string param, message;
};

inline DecodedError decode_error(std::string_view d) {
  DecodedError out;
  out.message = std::string(d);
  if (d.substr(0, kErrorPrefix.size()) != kErrorPrefix) return out;
  std::string_view rest = d.substr(kErrorPrefix.size());
  const size_t sp = rest.find(' ');
  if (sp == std::string_view::npos) return out;
  const auto kind = kind_of_name(rest.substr(0, sp));
  rest = rest.substr(sp + 1);
  const size_t colon = rest.find(':');
  if (!kind || colon == std::string_view::npos || colon == 0 || colon > 6) return out;
  size_t len = 0;
  for (char c : rest.substr(0, colon)) {
    if (c < '0' || c > '9') return out;
    len = len * 10 + size_t(c - '0');
  }
  rest = rest.substr(colon + 1);
  if (rest.size() < len + 2 || rest.substr(len, 2) != "] ") return out;
  out.typed = true;
  out.kind = *kind;
  out.param = std::string(rest.substr(0, len));
  out.message = std::string(rest.substr(len + 2));
  return out;
}

}  // namespace waste::ipc
