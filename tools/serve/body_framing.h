// Which request bodies waste-serve reads at all, decided from the headers before any body byte
// is read. httplib (0.11, Debian's) bounds a body by set_payload_max_length only when it comes
// with a Content-Length: a chunked body, or a gzip one it inflates, is read whole whatever its
// size, and a POST with neither Content-Length nor chunks is read until the client closes.
// So a body must come plain, with its length; the answer names the header to change.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "tools/serve/openai.h"

namespace waste::serve {

struct BodyHeaders {
  std::string method;
  std::optional<std::string> content_length, transfer_encoding, content_encoding, content_type;
};

// httplib parses an application/x-www-form-urlencoded body as a form and refuses one over this
// many bytes (its CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH, compiled into the library).
constexpr uint64_t kFormBodyLimit = 8192;
// (main.cpp, which includes httplib, asserts that the two agree.)

// The refusal for a body this server will not read, or nullopt (read it; --max-body still
// applies to its Content-Length). After a refusal the connection must close: the body was not
// read.
std::optional<ApiError> refuse_body_framing(const BodyHeaders& h);

}  // namespace waste::serve
