// Serves Engine (proto/engine.capnp) over Cap'n Proto two-party connections: one Engine object
// per connection; each Session capability it hands out closes its session (cancelling any
// request, freeing the state) when released, which happens at the latest when the connection
// ends. Runs on the calling thread's kj event loop; the EngineService's worker delivers tokens
// to it through a TokenMailbox (compute/server/token_mailbox.h) whose eventfd `port` watches.
#pragma once
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include <string>

#include "compute/server/engine_service.h"

namespace waste::server {

// Accepts on `listener` until the returned promise is dropped.
// session_files: whether peers may save and load session files (paths on this host): true for
// the run directory's Unix socket, false for a TCP listener.
// port: the calling thread's event port (kj::setupAsyncIo().unixEventPort).
kj::Promise<void> serve_engine(EngineService& service, kj::Own<kj::ConnectionReceiver> listener, bool session_files,
                               kj::UnixEventPort& port);

}  // namespace waste::server
