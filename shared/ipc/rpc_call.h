// Runs a Cap'n Proto call and turns a kj exception into a waste::Error naming the peer and
// the operation, with the server's own message (kj sends it as "remote exception: <message>").
#pragma once
#include <kj/exception.h>

#include <string>
#include <utility>

#include "shared/util/error.h"

namespace waste::ipc {

// peer: "iod /run/x/iod.sock", "compute unix:/run/x/compute.sock". gone: when non-null, what to
// say when the peer disconnected (e.g. "compute went away").
template <typename F>
auto rpc_call(const std::string& peer, const char* what, F&& f, const char* gone = nullptr) -> decltype(f()) {
  try {
    return f();
  } catch (const kj::Exception& e) {
    std::string d = e.getDescription().cStr();
    const std::string prefix = "remote exception: ";
    if (d.rfind(prefix, 0) == 0) d = d.substr(prefix.size());
    if (gone && e.getType() == kj::Exception::Type::DISCONNECTED) d = std::string(gone) + " (" + d + ")";
    throw Error(peer + ": " + what + ": " + d);
  }
}

}  // namespace waste::ipc
