// Typed errors across RPC (shared/ipc/rpc_error.h, rpc_call.h): the kind and the field at fault
// survive the trip through a kj exception's description, whatever the field's characters; a
// description without the prefix stays an Internal error with its whole text; a peer that went
// away is Unavailable and names itself.
#include <doctest/doctest.h>
#include <kj/async-io.h>
#include <kj/exception.h>

#include <stdexcept>

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

// Unanswered (Error::unanswered) is how /health tells "not answering" (stopped, wedged) from
// "unreachable": only within()'s own deadline sets it, never a peer's text that looks like it.
TEST_CASE("rpc_call: a wait past its deadline is Unavailable and unanswered; nothing else is") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  try {  // a real deadline on a promise that never resolves
    ipc::rpc_call("iod /run/iod.sock", "fetch", [&]() -> int {
      return ipc::wait_within(kj::Promise<int>(kj::NEVER_DONE), io.waitScope, io.provider->getTimer(), 20);
    }, "iod went away");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unavailable);
    CHECK(e.param() == "iod");
    CHECK(e.unanswered());
    CHECK(unanswered(e));
    CHECK_FALSE(e.relayed());
    // The deadline's text, not the "gone" text: the peer is there, it did not answer.
    CHECK(std::string(e.what()) == std::string("iod /run/iod.sock: fetch: ") + ipc::kNoAnswer + "20 ms (stopped or wedged?)");
  }
  // A promise that resolves in time is its value; the deadline is cancelled with it.
  CHECK(ipc::rpc_call("iod /x", "ping", [&]() {
    return ipc::wait_within(kj::Promise<int>(7), io.waitScope, io.provider->getTimer(), 1000);
  }) == 7);
  // A peer that says the words over the wire did not time out here: relayed text, not unanswered.
  try {
    ipc::rpc_call("compute unix:/x", "generate", []() -> int {
      throw kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                          kj::str("remote exception: ", ipc::kNoAnswer, "5 ms (stopped or wedged?)"));
    });
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unavailable);
    CHECK_FALSE(e.unanswered());
  }
  // A connection that went away (local DISCONNECTED, other text) is gone, not unanswered.
  try {
    ipc::rpc_call("iod /run/iod.sock", "fetch", []() -> int {
      throw kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str("Peer disconnected."));
    }, "iod went away");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unavailable);
    CHECK_FALSE(e.unanswered());
    CHECK(std::string(e.what()) == "iod /run/iod.sock: fetch: iod went away (Peer disconnected.)");
  }
  // Any exception that is not an Error is not unanswered either.
  CHECK_FALSE(unanswered(std::runtime_error(std::string(ipc::kNoAnswer) + "1 ms")));
}

namespace {

// A monotonic clock the test sets by hand.
struct ManualClock final : kj::MonotonicClock {
  kj::TimePoint t;
  explicit ManualClock(kj::TimePoint start) : t(start) {}
  kj::TimePoint now() const override { return t; }
};

}  // namespace

TEST_CASE("within: the deadline counts from the clock's now, not from the event loop's last turn") {
  // A timer whose time stopped at the loop's last turn (origin), while the real clock went on
  // by 20 s: a caller that computed outside the loop for 20 s then sends a call with 10 s to
  // answer. Its deadline is 30 s, so at 25 s the call still waits and its answer counts.
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  const kj::TimePoint origin = kj::origin<kj::TimePoint>();
  kj::TimerImpl timer(origin);
  ManualClock clock(origin + 20 * kj::SECONDS);
  {
    auto paf = kj::newPromiseAndFulfiller<int>();
    auto answer = ipc::within(kj::mv(paf.promise), timer, 10'000, clock);
    timer.advanceTo(origin + 25 * kj::SECONDS);
    CHECK_FALSE(answer.poll(ws));  // before the deadline: not timed out
    paf.fulfiller->fulfill(7);
    CHECK(answer.wait(ws) == 7);
  }
  {
    // And past the deadline (30 s) an unanswered call ends with the "no answer" error.
    auto paf = kj::newPromiseAndFulfiller<int>();
    auto answer = ipc::within(kj::mv(paf.promise), timer, 10'000, clock);
    timer.advanceTo(origin + 31 * kj::SECONDS);
    REQUIRE(answer.poll(ws));
    try {
      answer.wait(ws);
      FAIL("no throw");
    } catch (const kj::Exception& e) {
      CHECK(e.getType() == kj::Exception::Type::DISCONNECTED);
      CHECK(std::string(e.getDescription().cStr()).rfind(ipc::kNoAnswer, 0) == 0);
    }
  }
}
