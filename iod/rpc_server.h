// Serves ExpertStore (proto/expert_store.capnp) on a unix socket: one Cap'n Proto two-party
// connection per client, each with its own server object, so the pins a connection takes die
// with it (a client killed with -9 leaks nothing).
#pragma once
#include <kj/async-io.h>

#include <string>

#include "iod/store.h"

namespace waste::iod {

// Listens on `socket_path` (which must not exist) and accepts until the returned promise is
// dropped. Runs on the calling thread's kj event loop.
kj::Promise<void> serve_expert_store(Store& store, kj::AsyncIoContext& io, const std::string& socket_path);

}  // namespace waste::iod
