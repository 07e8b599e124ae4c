// Which request bodies waste-serve refuses before reading them (tools/serve/body_framing.h):
// every framing httplib could not bound, and a form body past httplib's own form limit.
#include <doctest/doctest.h>

#include "tools/serve/body_framing.h"

using waste::serve::BodyHeaders;
using waste::serve::kFormBodyLimit;
using waste::serve::refuse_body_framing;

namespace {

BodyHeaders post(std::optional<std::string> length, std::optional<std::string> type = "application/json") {
  BodyHeaders h;
  h.method = "POST";
  h.content_length = std::move(length);
  h.content_type = std::move(type);
  return h;
}

}  // namespace

TEST_CASE("body framing: a plain JSON body with its length is read; GET needs none") {
  CHECK_FALSE(refuse_body_framing(post("123")));
  CHECK_FALSE(refuse_body_framing(post("0")));
  CHECK_FALSE(refuse_body_framing(post("123", std::nullopt)));
  CHECK_FALSE(refuse_body_framing(post("123", "text/plain")));
  BodyHeaders get;
  get.method = "GET";
  CHECK_FALSE(refuse_body_framing(get));
  BodyHeaders identity = post("10");
  identity.content_encoding = " Identity ";
  CHECK_FALSE(refuse_body_framing(identity));
}

TEST_CASE("body framing: chunked, compressed or length-less bodies are refused naming the header") {
  BodyHeaders chunked = post(std::nullopt);
  chunked.transfer_encoding = "chunked";
  auto e = refuse_body_framing(chunked);
  REQUIRE(e);
  CHECK(e->status == 411);
  CHECK(e->param == "Content-Length");
  CHECK(e->message.find("chunked") != std::string::npos);
  // Both headers (a request smuggling shape): still refused.
  chunked.content_length = "5";
  CHECK(refuse_body_framing(chunked));

  BodyHeaders gz = post("100");
  gz.content_encoding = "gzip";
  e = refuse_body_framing(gz);
  REQUIRE(e);
  CHECK(e->status == 415);
  CHECK(e->param == "Content-Encoding");
  CHECK(e->message.find("gzip") != std::string::npos);
  gz.content_encoding = std::string(1000, 'x');
  e = refuse_body_framing(gz);
  REQUIRE(e);
  CHECK(e->message.size() < 200);  // the header is quoted, not echoed whole

  e = refuse_body_framing(post(std::nullopt));
  REQUIRE(e);
  CHECK(e->status == 411);
  BodyHeaders put = post(std::nullopt);
  put.method = "PUT";
  CHECK(refuse_body_framing(put));
}

TEST_CASE("body framing: multipart is refused; a form body only past httplib's form limit") {
  auto e = refuse_body_framing(post("100", "multipart/form-data; boundary=abc"));
  REQUIRE(e);
  CHECK(e->status == 415);
  CHECK(e->param == "Content-Type");
  CHECK(e->message.find("multipart/form-data") != std::string::npos);
  CHECK(e->message.find("boundary") == std::string::npos);

  const std::string form = "application/x-www-form-urlencoded";
  CHECK_FALSE(refuse_body_framing(post(std::to_string(kFormBodyLimit), form)));
  e = refuse_body_framing(post(std::to_string(kFormBodyLimit + 1), form));
  REQUIRE(e);
  CHECK(e->status == 415);
  CHECK(e->message.find("application/json") != std::string::npos);
  CHECK(refuse_body_framing(post("99999999999999999999999999999", form)));  // no overflow
  CHECK(refuse_body_framing(post("12x", form)));
}
