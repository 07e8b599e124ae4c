// Runs a Cap'n Proto call and turns a kj exception into a waste::Error naming the peer and
// the operation, with the server's own message (kj sends it as "remote exception: <message>").
// wait_within bounds how long a call may wait for its peer: every wait on another process has
// a deadline, so a stopped or wedged peer is an error naming it, never a hang.
#pragma once
#include <kj/async.h>
#include <kj/exception.h>
#include <kj/time.h>
#include <kj/timer.h>

#include <cstdint>
#include <string>
#include <utility>

#include "shared/ipc/rpc_error.h"
#include "shared/util/error.h"

namespace waste::ipc {

// What a timed-out wait says (after the peer and the operation): rpc_call and the callers that
// tell "not answering" from "gone" match this one definition.
constexpr const char* kNoAnswer = "no answer within ";

// `promise`, or after timeout_ms (<= 0: no deadline) a DISCONNECTED kj exception saying how
// long it waited (the call is cancelled: the promise is dropped). To the caller, a peer that
// stopped answering is as good as gone.
// The deadline counts from `clock`'s now, never from timer.now(): a kj timer's time is the time
// of the event loop's last turn, and a client that computed or slept outside the loop for longer
// than timeout_ms (a compute thread between two RPCs, a chat client between turns) would
// otherwise send its call with a deadline already past, and report "no answer" from a peer that
// answers in microseconds (the K3 benchmark's "stats: no answer within 10000 ms", 2026-12-04).
template <typename T>
kj::Promise<T> within(kj::Promise<T>&& promise, kj::Timer& timer, int64_t timeout_ms,
                      const kj::MonotonicClock& clock = kj::systemPreciseMonotonicClock()) {
  if (timeout_ms <= 0) return kj::mv(promise);
  const kj::TimePoint deadline = clock.now() + timeout_ms * kj::MILLISECONDS;
  return promise.exclusiveJoin(timer.atTime(deadline).then([timeout_ms]() -> kj::Promise<T> {
    return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                         kj::str(kNoAnswer, timeout_ms, " ms (stopped or wedged?)"));
  }));
}

// Waits on `ws` for `promise`, for at most timeout_ms (see within).
template <typename T>
T wait_within(kj::Promise<T>&& promise, kj::WaitScope& ws, kj::Timer& timer, int64_t timeout_ms) {
  return within(kj::mv(promise), timer, timeout_ms).wait(ws);
}

// peer: "iod /run/x/iod.sock", "compute unix:/run/x/compute.sock". gone: when non-null, what to
// say when the peer disconnected (e.g. "compute went away").
// The peer's typed errors (rpc_error.h) keep their kind and field and are marked relayed; a
// connection that failed (refused, gone, no answer in time) is Unavailable (param: "iod",
// "compute"); any other failure of the peer is Internal.
template <typename F>
auto rpc_call(const std::string& peer, const char* what, F&& f, const char* gone = nullptr) -> decltype(f()) {
  try {
    return f();
  } catch (const kj::Exception& e) {
    std::string d = e.getDescription().cStr();
    const std::string prefix = "remote exception: ";
    const bool remote = d.rfind(prefix, 0) == 0;
    if (remote) d = d.substr(prefix.size());
    DecodedError de = decode_error(d);
    if (de.typed) {
      Error err(peer + ": " + what + ": " + de.message, de.kind, de.param, de.message);
      throw err.set_relayed();
    }
    // Not the peer's own failure: the connection's (refused, no socket, gone, no answer in
    // time). An Unavailable error's param names the process: the peer's first word.
    if (!remote || e.getType() == kj::Exception::Type::DISCONNECTED) {
      // within()'s own exception (local, never relayed): the one place its text is matched.
      const bool no_answer = !remote && d.rfind(kNoAnswer, 0) == 0;
      if (gone && e.getType() == kj::Exception::Type::DISCONNECTED && !no_answer) d = std::string(gone) + " (" + d + ")";
      Error err(peer + ": " + what + ": " + d, ErrorKind::Unavailable, peer.substr(0, peer.find(' ')));
      if (no_answer) err.set_unanswered();
      throw err;
    }
    throw Error(peer + ": " + what + ": " + d);
  }
}

}  // namespace waste::ipc
