// Typed errors across RPC (shared/ipc/rpc_error.h, rpc_call.h): the kind and the field at fault
// survive the trip through a kj exception's description, whatever the field's characters; a
// description without the prefix stays an Internal error with its whole text; a peer that went
// away is Unavailable and names itself.
#include <doctest/doctest.h>
#include <kj/exception.h>

#include "shared/ipc/rpc_call.h"
#include "shared/ipc/rpc_error.h"

using namespace waste;

TEST_CASE("rpc_error: every kind and any param survive encode -> decode") {
  for (ErrorKind k : {ErrorKind::Internal, ErrorKind::InvalidRequest, ErrorKind::ContextLength, ErrorKind::Overloaded,
                      ErrorKind::Unavailable}) {
    for (const std::string& param : {std::string(), std::string("messages[0].content[1]"), std::string("a] b:c 12:x"), std::string(300, ']')}) {
      const std::string wire = ipc::encode_error(k, param, "the reason: [x] 3:y");
      const ipc::DecodedError d = ipc::decode_error(wire);
      CAPTURE(wire);
      CHECK(d.typed);
      CHECK(d.kind == k);
      CHECK(d.param == param);
      CHECK(d.message == "the reason: [x] 3:y");
    }
    CHECK(kind_of_name(error_kind_name(k)) == k);
  }
}

TEST_CASE("rpc_error: a description without the prefix, or a broken one, is Internal with all its text") {
  for (const std::string& d : std::initializer_list<std::string>{"plain failure", "[waste-error", "[waste-error bogus 0:] x", "[waste-error internal 5:ab] x",
                              "[waste-error overloaded x:] y", "[waste-error overloaded 99999999:] y", ""}) {
    const ipc::DecodedError e = ipc::decode_error(d);
    CAPTURE(d);
    CHECK_FALSE(e.typed);
    CHECK(e.kind == ErrorKind::Internal);
    CHECK(e.message == d);
  }
}

TEST_CASE("rpc_call: a peer's typed error keeps its kind, param and own message; a lost peer is Unavailable") {
  auto remote = [](const std::string& description, kj::Exception::Type type = kj::Exception::Type::FAILED) {
    return [=]() -> int {
      throw kj::Exception(type, __FILE__, __LINE__, kj::str("remote exception: ", description.c_str()));
    };
  };
  try {
    ipc::rpc_call("compute unix:/x", "generate", remote(ipc::encode_error(ErrorKind::ContextLength, "", "too long")));
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::ContextLength);
    CHECK(e.relayed());
    CHECK(e.message() == "too long");
    CHECK(std::string(e.what()) == "compute unix:/x: generate: too long");
  }
  try {
    ipc::rpc_call("iod /run/iod.sock", "fetch", remote("bye", kj::Exception::Type::DISCONNECTED));
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unavailable);
    CHECK(e.param() == "iod");
    CHECK_FALSE(e.relayed());
  }
  try {  // a local failure of the connection (no "remote exception:"): the peer is not there
    ipc::rpc_call("compute unix:/x", "connect", []() -> int {
      throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str("connect(): Connection refused"));
    });
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unavailable);
    CHECK(e.param() == "compute");
  }
  try {
    ipc::rpc_call("iod /run/iod.sock", "fetch", remote("a bug"));
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Internal);
    CHECK(std::string(e.what()) == "iod /run/iod.sock: fetch: a bug");
  }
}
