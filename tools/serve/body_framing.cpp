#include "tools/serve/body_framing.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace waste::serve {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string trimmed(const std::string& s) {
  const auto a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A header's value as an error message quotes it: at most this much of it.
std::string quoted(const std::string& v) { return v.size() <= 64 ? v : v.substr(0, 64) + "..."; }

}  // namespace

std::optional<ApiError> refuse_body_framing(const BodyHeaders& h) {
  if (h.method != "POST" && h.method != "PUT" && h.method != "PATCH") return std::nullopt;
  if (h.content_encoding) {
    const std::string enc = lower(trimmed(*h.content_encoding));
    if (!enc.empty() && enc != "identity")
      return ApiError{415, "Content-Encoding " + quoted(enc) + " is not taken: send the request body uncompressed",
                      "invalid_request_error", "Content-Encoding", "unsupported_content_encoding"};
  }
  if (h.transfer_encoding)
    return ApiError{411, "Transfer-Encoding " + quoted(lower(trimmed(*h.transfer_encoding))) +
                             " is not taken: send the request body with a Content-Length",
                    "invalid_request_error", "Content-Length", "length_required"};
  if (!h.content_length)
    return ApiError{411, "the request has no Content-Length: send a JSON body with its length", "invalid_request_error",
                    "Content-Length", "length_required"};
  const std::string type = h.content_type ? lower(trimmed(*h.content_type)) : "";
  if (starts_with(type, "multipart/"))
    return ApiError{415, "Content-Type " + quoted(type.substr(0, type.find(';'))) + " is not taken: send the JSON body as application/json",
                    "invalid_request_error", "Content-Type", "unsupported_content_type"};
  // curl -d sends this type; a small body of it is read as JSON like any other, a larger one
  // would get httplib's own 413 that names no cause.
  if (starts_with(type, "application/x-www-form-urlencoded")) {
    // from_chars fails (result_out_of_range) rather than wrapping on a length past 2^64.
    uint64_t n = 0;
    const std::string& len = *h.content_length;
    const auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), n);
    const bool digits = !len.empty() && ec == std::errc() && end == len.data() + len.size();
    if (!digits || n > kFormBodyLimit)
      return ApiError{415, "a body sent as application/x-www-form-urlencoded (curl -d's default) may have at most " +
                               std::to_string(kFormBodyLimit) + " bytes: send it with Content-Type: application/json",
                      "invalid_request_error", "Content-Type", "unsupported_content_type"};
  }
  return std::nullopt;
}

}  // namespace waste::serve
